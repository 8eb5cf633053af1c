"""The run config: its sections, loading (defaults <- preset <- recipe <- command line), validation, the config a model was made with."""
