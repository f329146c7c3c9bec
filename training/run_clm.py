"""Next-leaf prediction (a causal LM, not a task of the paper): every leaf from the leaves before it, compared with
BP_k's exact next-leaf distributions and with the exact entropy of the sequences.

Usage (see training/README.md, "Next-leaf prediction")::

    python training/run_clm.py                        # the laptop run (<= 15 minutes on a 2-core CPU)
    python training/run_clm.py --preset smoke         # the first run (<= 2 minutes on a 2-core CPU)
    python training/run_clm.py --grammar_file G.json  # your own grammar (the JSON Grammar.save writes)
    python training/run_clm.py --preset paper         # the paper's model and optimiser on its MLM data and epochs
    python training/run_clm.py args.json              # every argument from one JSON file
    accelerate launch training/run_clm.py [...]       # data-parallel, e.g. --num_processes 2 --cpu
"""

import sys

from hf_treelang.train.loop import main

if __name__ == "__main__":
    sys.exit(main("clm", as_script=True))
