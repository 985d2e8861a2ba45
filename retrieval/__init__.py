"""What a user calls: Searcher, fusion, runs, metrics and the `alignir` CLI."""
