"""Landfall's trainer: the PyTorch program every Vertex AI replica runs (`python -m trainer.task`).

The loader for a trained model is `trainer.model_io.load_model(model_dir)`; see trainer/README.md.
"""
