"""Each rank writes its environment to argv[1].<rank>.json and the job ends: what a shell
left from an MPI launch still has once the launch is over."""

import json
import os
import sys

rank = os.environ.get("OMPI_COMM_WORLD_RANK", "x")
with open(f"{sys.argv[1]}.{rank}.json", "w") as f:
    json.dump(dict(os.environ), f)
