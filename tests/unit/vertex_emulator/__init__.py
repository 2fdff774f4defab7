"""Pure-logic tables of the Vertex AI JobService emulator's parts (deploy/vertex_emulator/), no server."""
