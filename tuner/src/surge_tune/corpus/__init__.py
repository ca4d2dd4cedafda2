"""The training-corpus generator: real fio and MPI-IO runs on this machine, recorded as Surge profiles."""
