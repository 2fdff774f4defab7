"""Dispatcher: a TrainingRequest becomes a planned run and exactly one Vertex AI CustomJob."""
