"""fmdoctor: deterministic diagnosis and safe remediation for FM training and inference clusters on AWS."""

__version__ = "0.1.0"
