"""The local stack: Google's emulators, fake-gcs-server, functions-framework servers and the Vertex emulator."""
