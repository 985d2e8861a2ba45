"""Text -> dense vector -> aligned tokens -> sparse vector (the first stage of the data path)."""
