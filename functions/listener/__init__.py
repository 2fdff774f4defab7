"""Completion listener: Vertex job log entries become run states, timings, metrics and cost."""
