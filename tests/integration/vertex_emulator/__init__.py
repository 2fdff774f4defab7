"""Contract tests of the Vertex AI JobService emulator (deploy/vertex_emulator/)."""
