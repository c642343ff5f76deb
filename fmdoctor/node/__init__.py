"""What only the node itself can tell: nvidia-smi, the kernel's Xid log, libfabric's EFA provider.

Pure parsers over the text those tools print, so tests replay recorded output through a fake host.
"""
