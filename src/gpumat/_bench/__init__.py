"""Benchmarks behind `python -m gpumat bench <op>`: each variant against NVIDIA's libraries in one process."""
