"""Side-by-side benchmarks against peers, on the same data in one run (`make bench`)."""
