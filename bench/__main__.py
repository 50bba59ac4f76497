"""Run every benchmark and print one table: each figure beside the floor it is compared with."""

import sys

from bench import cli_speed, completion_speed, pod_cost, ssh_speed, team_speed


def main() -> int:
    """Run the benchmarks named on the command line (default: all)."""
    wanted = set(sys.argv[1:]) or {"cli", "completion", "pod", "ssh", "team"}
    rows: list[tuple[str, str, str, str]] = []
    if "cli" in wanted:
        rows += cli_speed.run()
    if "completion" in wanted:
        rows += completion_speed.run()
    if "pod" in wanted:
        rows += pod_cost.run()
    if "ssh" in wanted:
        rows += ssh_speed.run(lambda text: print(text, file=sys.stderr, flush=True))
    if "team" in wanted:
        rows += team_speed.run()
    width = [max(len(r[i]) for r in [*rows, ("what", "figure", "floor", "aim")]) for i in range(4)]
    head = ("what", "figure", "floor", "aim")
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, width, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in width) + "|")
    for row in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, width, strict=True)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
