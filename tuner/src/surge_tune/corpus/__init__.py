"""The training-corpus generator: real fio and MPI-IO runs on this machine through `surge run`, over a sweep
of layouts (`surge_job.py`), recorded as Surge profiles."""
