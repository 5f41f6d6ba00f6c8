"""The run record: facts on disk, one schema. Every view is recomputed from it."""
