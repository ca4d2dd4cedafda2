"""DCA-IO (seed 003): stripe count and size from a history of runs, with the extract's corrected procedures."""
