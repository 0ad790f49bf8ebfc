"""Benchmarks (``goggles bench ...``): each measures goggles beside a peer or a baseline run on the same
machine in the same run, and prints one line per figure, its last line the headline."""
