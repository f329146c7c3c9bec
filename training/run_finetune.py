"""Fine-tune root classification from an MLM checkpoint, encoder frozen or not (paper Fig. 1f).

Usage (see training/README.md)::

    python training/run_finetune.py                        # from outputs/run_mlm (run run_mlm.py first)
    python training/run_finetune.py --freeze_encoder true  # train the root readout only (Fig. 1f, squares)
    python training/run_finetune.py --model_name_or_path path/to/mlm/output
    python training/run_finetune.py --preset paper         # the paper's sizes
    python training/run_finetune.py args.json              # every argument from one JSON file
    accelerate launch training/run_finetune.py [...]       # data-parallel, e.g. --num_processes 2 --cpu
"""

import sys

from hf_treelang.train.loop import main

if __name__ == "__main__":
    sys.exit(main("finetune", as_script=True))
