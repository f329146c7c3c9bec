"""Root classification (paper Sec. 3.2): train a transformer to infer the root, compared with BP.

Usage (see training/README.md)::

    python training/run_root.py                        # the default CPU run (<= 15 minutes)
    python training/run_root.py --preset smoke         # the first run (<= 2 minutes on a 2-core CPU)
    python training/run_root.py --grammar_file G.json  # your own grammar (the JSON Grammar.save writes)
    python training/run_root.py --preset paper         # the paper's sizes
    python training/run_root.py args.json              # every argument from one JSON file
    accelerate launch training/run_root.py [...]       # data-parallel, e.g. --num_processes 2 --cpu
"""

import sys

from hf_treelang.train.loop import main

if __name__ == "__main__":
    sys.exit(main("root", as_script=True))
