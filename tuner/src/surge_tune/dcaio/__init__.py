"""DCA-IO ([DCA-IO] in docs/references.md): stripe count and size from a history of runs; docs/tuner.md says
how Surge reads the procedures where the printed listings are ambiguous or wrong."""
