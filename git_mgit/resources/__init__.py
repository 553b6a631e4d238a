"""How much of the machine git-mgit's own work takes: the cores its threads may use
(cores), chunk-sized memory paid for once per process (malloc), and the files a process
may hold open (files)."""
