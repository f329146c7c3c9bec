"""Masked language modelling (paper Sec. 3.3): one masked leaf per sequence, compared with BP.

Usage (see training/README.md)::

    python training/run_mlm.py                        # the default CPU run (<= 15 minutes)
    python training/run_mlm.py --preset smoke         # the first run (<= 2 minutes on a 2-core CPU)
    python training/run_mlm.py --grammar_file G.json  # your own grammar (the JSON Grammar.save writes)
    python training/run_mlm.py --preset paper         # the paper's sizes
    python training/run_mlm.py args.json              # every argument from one JSON file
    accelerate launch training/run_mlm.py [...]       # data-parallel, e.g. --num_processes 2 --cpu
"""

import sys

from hf_treelang.train.loop import main

if __name__ == "__main__":
    sys.exit(main("mlm", as_script=True))
