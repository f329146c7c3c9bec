"""The sample-complexity campaign (hf_treelang.sweep.sample_complexity): every root architecture of the comparison on
the paper's grammar, and four of them on Random Hierarchy Models of m ∈ {2, 3, 4} and L ∈ {2, 3}, each (P, seed)
trained until its validation accuracy stops improving, two one-thread runs at a time, curve by curve, resumable
(rerun the same command after a stop).

    python training/sample_complexity_campaign.py OUT --plan            # the runs and their time bounds; trains nothing
    python training/sample_complexity_campaign.py OUT                   # train (or resume) every curve
    python training/sample_complexity_campaign.py OUT --only paper      # the curves whose name starts so
    python training/sample_complexity_campaign.py OUT --publish docs/sample_complexity   # publish the finished curves

--publish trains nothing: it writes the rows of every curve whose runs have all finished (runs.csv, runs.json, the
dataset card), pstar.json, summary.md and the figures (hf_treelang.analysis.sample_complexity_results). An empty or
unknown --only and a bad OUT are refused in one line before any work.
"""

import argparse
import sys

from hf_treelang.analysis.sample_complexity_results import publish_campaign
from hf_treelang.sweep.sample_complexity import CAMPAIGN_WORKERS, plan_campaign, run_campaign


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="the campaign's folder (OUT/runs/<grammar>/<architecture>-P<P>-seed<s>)")
    parser.add_argument("--only", nargs="+", default=None,
                        help="curve names (<grammar>-<architecture>) or their prefixes (default: every curve)")
    parser.add_argument("--workers", type=int, default=CAMPAIGN_WORKERS,
                        help=f"runs at a time, one CPU thread each (default {CAMPAIGN_WORKERS})")
    parser.add_argument("--plan", action="store_true", help="print the runs and their time bounds; train nothing")
    parser.add_argument("--publish", default=None, metavar="DIR",
                        help="write the finished curves' results into DIR; train nothing")
    args = parser.parse_args(argv)
    try:
        if args.plan and args.publish:
            raise ValueError("--plan and --publish exclude each other: give one")
        if args.plan:
            for line in plan_campaign(args.out, only=args.only, workers=args.workers).lines():
                print(line)
        elif args.publish:
            result = publish_campaign(args.out, args.publish, only=args.only, log=print)
            print(f"wrote {', '.join(str(path) for path in result['files'])}")
        else:
            result = run_campaign(args.out, only=args.only, workers=args.workers)
            return 1 if result.failed else 0
    except ValueError as error:
        print(f"sample_complexity_campaign.py: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
