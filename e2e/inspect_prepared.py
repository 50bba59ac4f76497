"""What Axolotl trains on: the datasets it prepared, read back with the tokenizer.

Run with the Axolotl environment's Python::

    python e2e/inspect_prepared.py PREPARED_DIR MODEL_DIR

``PREPARED_DIR`` is a run's ``dataset_prepared_path`` (one sub-directory per prepared
dataset, saved with ``datasets``' ``save_to_disk``). Prints one JSON object: for each
dataset, its rows, each with the whole text (``input_ids`` decoded) and the text of the
tokens that carry a label (the ones the loss is computed on). A label is either -100
(masked) or the token itself; anything else is reported as ``bad_labels``.
"""

import json
import sys
from pathlib import Path


def main(prepared: Path, model: Path) -> None:
    import datasets
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))
    report: dict[str, list[dict[str, object]]] = {}
    for directory in sorted(p for p in prepared.iterdir() if (p / "state.json").is_file()):
        rows = []
        for row in datasets.load_from_disk(str(directory)):
            ids, labels = row["input_ids"], row["labels"]
            trained = [token for token, label in zip(ids, labels, strict=True) if label != -100]
            bad = sum(
                1 for token, label in zip(ids, labels, strict=True) if label not in (-100, token)
            )
            rows.append(
                {
                    "text": tokenizer.decode(ids),
                    "trained": tokenizer.decode(trained),
                    "bad_labels": bad,
                }
            )
        report[directory.name] = rows
    print(json.dumps(report))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python e2e/inspect_prepared.py PREPARED_DIR MODEL_DIR")
    main(Path(sys.argv[1]), Path(sys.argv[2]))
