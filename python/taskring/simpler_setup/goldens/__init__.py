"""Reference (golden) computations that Simpler's tests share, as upstream's
``simpler_setup.goldens`` names them."""
