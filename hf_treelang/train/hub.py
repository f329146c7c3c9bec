"""``--push_to_hub``: a finished run folder uploaded to the Hub once, with ``huggingface_hub``, when the run completes.

transformers' Trainer would create the repository when it starts and push at every save (``hub_strategy``); a run of
the package is a folder that is complete only at its end (``run_complete.json``, written last), so the Trainer is
given ``push_to_hub=False`` (:func:`without_trainer_pushes`) and the finished folder is uploaded as one commit
(:func:`upload_run`), its resumable checkpoints left out (``hf-treelang prune`` removes them from the folder too).
What the upload needs is checked before any work (:func:`check_hub_upload`): a repository id, a token, the Hub not
switched off. ``--hub_model_id`` names the repository (default: the output folder's name, in the token's namespace,
as transformers does), ``--hub_private_repo`` creates it private, ``--hub_revision`` uploads to that branch and
``--hub_token`` replaces the token of ``hf auth login``.

A runner that trains many runs (a sweep, ``reproduce``, an ensemble) uploads none: :func:`upload_command` is the
command that uploads one finished folder.
"""

from __future__ import annotations

import copy
import shlex
from pathlib import Path

UPLOAD_IGNORED = ("checkpoint-*", ".*")  # resumable checkpoints, and hidden files (the owner's claim while it runs)
HUB_FIELDS = ("push_to_hub", "hub_model_id", "hub_private_repo", "hub_revision", "hub_token")


def hub_repo_id(training_args) -> str:
    """The repository a run uploads to: ``hub_model_id``, or the output folder's name (transformers' default)."""
    return training_args.hub_model_id or Path(training_args.output_dir).absolute().name


def upload_command(output_dir, repo_id: str | None = None) -> str:
    """The command that uploads a finished run folder ``output_dir`` to ``repo_id`` (default: the folder's name),
    its checkpoints left out."""
    repo = repo_id or Path(output_dir).absolute().name
    return shlex.join(["hf", "upload", repo, str(output_dir), ".", "--exclude", UPLOAD_IGNORED[0]])


def check_hub_upload(training_args) -> None:
    """Raise a ValueError naming the flag when ``push_to_hub`` cannot upload the finished folder: a repository id
    the Hub refuses, the Hub switched off (``HF_HUB_OFFLINE``), or no token; nothing when ``push_to_hub`` is off."""
    if not training_args.push_to_hub:
        return
    from huggingface_hub import constants, get_token  # lazy: the Hub client, only for a run that uploads
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    repo_id = hub_repo_id(training_args)
    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise ValueError(f"`hub_model_id` {repo_id!r} is not a Hub repository id ('NAME' or 'USER/NAME'): "
                         f"{str(error).splitlines()[0]}") from None
    later = (f"train without --push_to_hub and upload the finished folder later: "
             f"{upload_command(training_args.output_dir, repo_id)}")
    if constants.HF_HUB_OFFLINE:
        raise ValueError(f"`push_to_hub` uploads the finished run to {repo_id!r}, but HF_HUB_OFFLINE is set: unset "
                         f"it, or {later}")
    if not (training_args.hub_token or get_token()):
        raise ValueError(f"`push_to_hub` uploads the finished run to {repo_id!r} and needs a Hub token: log in with "
                         f"`hf auth login`, pass --hub_token, or {later}")


def without_trainer_pushes(training_args):
    """A copy of ``training_args`` that the Trainer is given: ``push_to_hub`` off (no repository at its start, no
    push at each save), everything else the same."""
    if not training_args.push_to_hub:
        return training_args
    trainer_args = copy.copy(training_args)
    trainer_args.push_to_hub = False
    return trainer_args


def upload_run(output_dir, training_args, *, commit_message: str) -> str:
    """Upload the finished run folder ``output_dir`` to :func:`hub_repo_id` (created if missing, private with
    ``hub_private_repo``; on branch ``hub_revision`` if given) as one commit, checkpoints left out; returns the
    repository's URL."""
    from huggingface_hub import HfApi  # lazy: the Hub client, only for a run that uploads

    api = HfApi(token=training_args.hub_token or None)
    repo_id = hub_repo_id(training_args)
    url = api.create_repo(repo_id, private=bool(training_args.hub_private_repo), exist_ok=True, repo_type="model")
    repo_id = getattr(url, "repo_id", None) or repo_id  # with the namespace the Hub gave a bare name
    revision = training_args.hub_revision or None
    if revision is not None:
        api.create_branch(repo_id, branch=revision, exist_ok=True, repo_type="model")
    api.upload_folder(repo_id=repo_id, folder_path=str(output_dir), repo_type="model", revision=revision,
                      ignore_patterns=list(UPLOAD_IGNORED), commit_message=commit_message)
    return str(url)


__all__ = ["HUB_FIELDS", "UPLOAD_IGNORED", "check_hub_upload", "hub_repo_id", "upload_command", "upload_run",
           "without_trainer_pushes"]
