"""Storage and scoring. Knows nothing about models: never import encoders/ from here."""
