"""The reconciler: a scheduled pass that brings run records in line with Vertex, and cancel on request."""
