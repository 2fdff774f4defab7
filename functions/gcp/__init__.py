"""Adapters over Google Cloud clients (Firestore, Cloud Storage, Vertex AI). They never import a handler."""
