"""Scheduler context: Slurm and Kubernetes as data sources (nodes, reasons, devices, jobs/pods), and the node
changes fmdoctor can make through them (drain/resume, cordon/uncordon) once a person approved them."""
