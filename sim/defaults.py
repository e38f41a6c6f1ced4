"""What ``kvsim run`` and ``kvsim plan`` simulate when no workload, model or GPU is named."""

DEFAULT_WORKLOAD = "chat"
DEFAULT_MODEL = "Llama-3.1-8B"
DEFAULT_GPU = "H100-SXM"
