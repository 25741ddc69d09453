"""The local stack without Docker: a real Milvus standalone server and the qkv API as child
processes (``qkv stack up|down|status``), beside ``docker-compose.yml``, which runs the same
pair in containers."""

from stack.local import StackConfig, down, read_state, running, up
from stack.milvus_standalone import MILVUS_VERSION, MilvusStandalone
from stack.processes import StackError, free_port, stop_process

__all__ = ["MILVUS_VERSION", "MilvusStandalone", "StackConfig", "StackError", "down",
           "free_port", "read_state", "running", "stop_process", "up"]
