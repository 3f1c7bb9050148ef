"""The consumer process (`python -m nodes consumer --config F`): a PushConsumer running a
workload listener, journalling every delivery for the checker."""
