"""Checkpoint folders in verl's layout, written atomically, and finding where to resume.

    <run folder>/latest_checkpointed_iteration.txt    the step of the newest complete checkpoint
    <run folder>/global_step_<N>/actor/               model, optimizer, extra state (worker-written)
    <run folder>/global_step_<N>/critic/              the same for the critic, when there is one
    <run folder>/global_step_<N>/data.pt              the prompt loader's position
    <run folder>/global_step_<N>/trainer_state.json   step counter and KL controller

A checkpoint is written into a hidden temporary folder and renamed into place; only then is the
tracker file replaced (also by rename). A process killed at any moment (SIGKILL included) leaves
the previous checkpoint and a tracker that points at a complete one. Saving a step that already
exists (after resuming from an earlier one) first moves the old copy aside; resuming puts it back
if the crash came in between. Retention (trainer.max_actor_ckpt_to_keep, max_critic_ckpt_to_keep)
deletes only folders of steps below the one just saved, never that one nor a higher step (another
run's, when a fresh run saves into the same folder). It renames a folder to a hidden name before
deleting it, so a step folder is never seen half deleted. What a killed save leaves behind (hidden
`.tmp`, `.old` and `.deleting` folders) is cleaned up by the next save and when resuming (`clean_stale`).

A disk that is full (ENOSPC, EDQUOT, or EFBIG: a file over the size limit; also when torch wraps
it in a RuntimeError, which is why checkpoint files are written with `save_torch`) skips the save: the
temporary folder is removed, the previous checkpoint, tracker and older checkpoints stay as they
were, a one-line warning says what to do, and `save_checkpoint` returns None so that the run goes
on (the trainer logs `checkpoint/save_failed`). Any other OSError (permissions, a read-only
filesystem) will not go away by itself while the run trains on without checkpoints, so it stops
the run with a `CheckpointError` naming the step, folder and error.

Before a step folder is published, `checksums.json` in it lists every file's size and CRC-32
(`write_checksums`); a resume and `reinforge merge` check the files they read against it
(`verify_files`), so a file whose bytes changed after the save (a disk fault, a copy cut short or
overwritten) is named instead of loaded. CRC-32 (zlib, several GB/s) finds damage, not tampering; it
reads each file once more at a save and at a resume (about a second per 4 GB, from the page cache
right after a save). Folders without the file (saved before it was written, or by verl) are read
unchecked.
"""

from __future__ import annotations

import errno
import json
import math
import os
import pickle
import re
import shutil
import sys
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from reinforge.config.schema import TrainerConfig
from reinforge.errors import CheckpointError, ConfigError

TRACKER = "latest_checkpointed_iteration.txt"
STEP_FOLDER = re.compile(r"^global_step_(\d+)$")
UNREADABLE = (RuntimeError, EOFError, OSError, pickle.UnpicklingError)  # what torch.load raises on a file cut short or overwritten
STEP_RECORD = "metrics.json"  # in a step folder: the step's metrics, logged on resuming when the run had not logged them
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
CHECKSUMS = "checksums.json"  # in a step folder: each file's size and CRC-32, as saved


def crc32_of(path: Path) -> int:
    value = 0
    with open(path, "rb") as file:
        while chunk := file.read(1 << 24):
            value = zlib.crc32(chunk, value)
    return value


def write_checksums(folder: Path) -> None:
    """`folder`/checksums.json: the size and CRC-32 of every file under `folder` (relative POSIX paths)."""
    files = sorted(path for path in folder.rglob("*") if path.is_file() and path.name != CHECKSUMS)
    listed = {path.relative_to(folder).as_posix(): {"bytes": path.stat().st_size, "crc32": crc32_of(path)} for path in files}
    (folder / CHECKSUMS).write_text(json.dumps(listed, indent=0))


def verify_files(files: Iterable[Path], advice: str | None = None) -> None:
    """CheckpointError naming the first of `files` that checksums.json of its step folder (the nearest global_step_<N>
    folder above it, or the folder holding the file) lists with other bytes, or that it lists and that is gone; files of a
    folder without checksums.json are not checked. `advice` ends the error (default: resume an earlier step)."""
    manifests: dict[Path, dict] = {}
    for file in (Path(file).absolute() for file in files):
        root = None
        for folder in list(file.parents)[:3]:  # a step's files are at most 3 levels down (actor/huggingface/config.json)
            if (folder / CHECKSUMS).is_file():
                root = folder
                break
            if STEP_FOLDER.match(folder.name):  # a step folder without checksums: nothing to check against
                break
        if root is None:
            continue
        if root not in manifests:
            manifests[root] = checksums_of(root, advice)
        entry = manifests[root].get(file.relative_to(root).as_posix())
        if not isinstance(entry, dict):
            continue
        if not file.is_file():
            raise damaged(file, ChangedFile(f"it is gone, but the checkpoint was saved with it ({CHECKSUMS} lists it)"),
                          advice)
        try:
            size, crc = file.stat().st_size, crc32_of(file)
        except OSError as error:
            raise unreadable(file, error) from error
        if (size, crc) != (entry.get("bytes"), entry.get("crc32")):
            raise damaged(file, ChangedFile(f"its bytes are not those saved ({size} bytes, CRC-32 {crc}; {CHECKSUMS} lists "
                                           f"{entry.get('bytes')} bytes, CRC-32 {entry.get('crc32')})"), advice)


def checksums_of(folder: Path, advice: str | None = None) -> dict:
    """What checksums.json of `folder` lists (relative path -> bytes and crc32; {} when it has none); a file that cannot
    be read or holds no mapping is a CheckpointError naming it."""
    if not (folder / CHECKSUMS).is_file():
        return {}
    try:
        listed = json.loads((folder / CHECKSUMS).read_text())
        if not isinstance(listed, dict):
            raise ValueError(f"it holds a JSON {type(listed).__name__}, not the files' checksums")
    except (OSError, ValueError) as error:
        raise damaged(folder / CHECKSUMS, error, advice) from error
    return listed


def unreadable(path: Path, error: OSError) -> CheckpointError:
    """The error for a checkpoint file or folder this process may not read (its permissions), rather than a damaged one."""
    return CheckpointError(f"cannot read {path}: {error.strerror or error}; give this user read access to it (chmod, chown), "
                           "or resume another step")


def save_torch(obj: object, path: Path) -> None:
    """torch.save through a Python file object: a full disk then raises OSError with its errno in the exception chain
    (given a path, torch writes from native code and fails with a RuntimeError that names no cause)."""
    import torch  # here, not at the top: the CLI imports this module for its stop handling, before it knows it needs torch

    with open(path, "wb") as file:
        torch.save(obj, file)


_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")  # how the tokenizers library (Rust) reports one, in a plain Exception


def os_error_in(error: BaseException | None) -> OSError | None:
    """The OSError that `error` is or that caused it (torch wraps a failed write in a RuntimeError; the tokenizers
    library raises a plain Exception saying "No space left on device (os error 28)"), if any."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, OSError):
            return error
        if type(error) is Exception and (match := _RUST_OS_ERROR.search(str(error))):
            code = int(match.group(1))
            return OSError(code, os.strerror(code))
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


@contextmanager
def plain_os_errors() -> Iterator[None]:
    """A filesystem failure inside as a plain OSError (errno, message, file), which survives the trip from a worker
    process to the driver; torch wraps a failed write in a RuntimeError whose cause would be lost on the way."""
    try:
        yield
    except Exception as error:
        os_error = os_error_in(error)
        if os_error is None or os_error is error:
            raise
        raise OSError(os_error.errno, os_error.strerror, os_error.filename) from error


def _write_atomic(path: Path, text: str, tmp: Path | None = None) -> None:
    tmp = tmp or path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _delete(folder: Path) -> None:
    """Remove `folder`, first renaming it to a hidden name so that it never exists half deleted under its own."""
    if not folder.exists():
        return
    hidden = folder.with_name(f".{folder.name}.deleting")
    shutil.rmtree(hidden, ignore_errors=True)
    os.replace(folder, hidden)
    shutil.rmtree(hidden, ignore_errors=True)


def clean_stale(run_dir: Path) -> None:
    """Tidy what a killed save left in `run_dir`: temporary and half-deleted folders go; the old copy of a step
    that was being saved again goes when the new copy is in place and is put back when it is not."""
    if not run_dir.is_dir():
        return
    for path in [*run_dir.glob(".global_step_*"), *run_dir.glob("global_step_*/.*.deleting"), run_dir / f".{TRACKER}.tmp"]:
        if path.name.endswith(".old") and path.is_dir():
            final = run_dir / path.name[1:-len(".old")]
            if not final.exists():
                os.replace(path, final)
                continue
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)  # (several ranks of an sft run tidy at once)


def due(step: int, freq: int) -> bool:
    """Whether `step` is one of every `freq` (trainer.save_freq, test_freq; 0 or less: none is)."""
    return freq > 0 and step % freq == 0


ROLES = ("actor", "critic")  # the workers' parts of a step folder, each kept by its own max_*_ckpt_to_keep


def staging_folder(run_dir: Path, step: int) -> Path:
    """Where `save_checkpoint` has a step written before publishing it (other ranks write their files there too)."""
    return run_dir / f".global_step_{step}.tmp"


def save_checkpoint(run_dir: Path, step: int, write: Callable[[Path], None], keep: int | None = None,
                    keep_critic: int | None = None) -> Path | None:
    """Call `write(folder)` into a temporary folder, publish it as global_step_<step>, update the tracker.

    Then retention, per role as verl's: the actor/ of all but the newest `keep` steps counting this one
    (max_actor_ckpt_to_keep) and the critic/ of all but the newest `keep_critic` (max_critic_ckpt_to_keep) are
    deleted, and a step folder with neither left goes whole (a folder without those parts, an SFT checkpoint's, is
    what `keep` counts); None, 0 or less keeps all, as verl's. Folders of higher steps (another run's, in the same
    folder) are left alone.
    Returns the published folder, or None when the disk was full (see the module docstring).
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    clean_stale(run_dir)
    final = run_dir / f"global_step_{step}"
    tmp = staging_folder(run_dir, step)
    old = run_dir / f".global_step_{step}.old"  # saving a step again: the previous copy waits here
    published = False
    try:
        write(tmp)
        write_checksums(tmp)
        if final.exists():
            os.replace(final, old)
        os.replace(tmp, final)
        published = True
        _write_atomic(run_dir / TRACKER, f"{step}\n")
    except Exception as error:  # undo: the run folder is left as it was before this save
        shutil.rmtree(tmp, ignore_errors=True)
        if published:
            shutil.rmtree(final, ignore_errors=True)
        if old.exists() and not final.exists():
            os.replace(old, final)
        os_error = os_error_in(error)
        if os_error is None:  # not the filesystem: a bug, which keeps its traceback
            raise
        return _save_failed(run_dir, step, os_error)
    shutil.rmtree(old, ignore_errors=True)
    older = sorted(s for p in run_dir.iterdir() if (m := STEP_FOLDER.match(p.name)) and (s := int(m.group(1))) < step)
    for role, limit in (("actor", keep), ("critic", keep_critic)):
        if limit is None or limit <= 0:
            continue
        for old_step in older[:max(0, len(older) - limit + 1)]:
            folder = run_dir / f"global_step_{old_step}"
            others = [part for part in ROLES if part != role and (folder / part).is_dir()]
            if (folder / role).is_dir():  # the last role of a step takes its folder with it, at once (never half there)
                _delete(folder / role if others else folder)
            elif role == "actor" and not others:  # an SFT step: the folder is its model
                _delete(folder)
    return final


def _save_failed(run_dir: Path, step: int, error: OSError) -> None:
    """Warn and return None when the disk is full; raise CheckpointError for any other OSError."""
    tracker = run_dir / TRACKER
    latest = f"global_step_{tracker.read_text(errors='replace').strip()}" if tracker.is_file() else None
    reason = f"{error.strerror}: {error.filename}" if error.strerror and error.filename else error.strerror or str(error)
    if error.errno in DISK_FULL:
        stays = f"the latest checkpoint stays {latest}" if latest else "there is no checkpoint yet"
        if error.errno == errno.EFBIG:  # the process's file size limit (ulimit -f), not the disk
            what = (f"a file went over this process's file size limit ({reason})", "Raise the limit (ulimit -f) and "
                    "resume, or train without checkpoints (trainer.save_freq=-1)")
        else:
            what = (f"the disk is full ({reason})", "Free space there or point trainer.default_local_dir at a larger disk "
                    "(trainer.max_actor_ckpt_to_keep=N keeps N checkpoints, and the disk must hold N + 1: the oldest is "
                    "deleted after the new one is saved)")
        print(f"reinforge: warning: step {step}: checkpoint not saved, {what[0]}; training goes on and {stays} in {run_dir}. "
              f"{what[1]}", file=sys.stderr, flush=True)
        return None
    raise CheckpointError(f"step {step}: cannot write the checkpoint in {run_dir} ({reason}); the latest checkpoint is "
                          f"{latest or 'none: no step was saved yet'}. Check that trainer.default_local_dir is writable, or "
                          "set trainer.save_freq=-1 to train without checkpoints") from error


def saved_steps(run_dir: Path) -> list[int]:
    """The steps of the global_step_<N> folders in `run_dir`, in order."""
    if not run_dir.is_dir():
        return []
    return sorted(int(match.group(1)) for match in map(STEP_FOLDER.match, os.listdir(run_dir)) if match)


def resume_folder(trainer: TrainerConfig) -> Path | None:
    """The global_step_<N> folder to resume from, or None to start fresh. A fresh start in a folder holding another run's
    checkpoints, which it would write over (and whose metrics it would drop), is a ConfigError."""
    if trainer.resume_mode == "disable":
        steps = saved_steps(Path(trainer.default_local_dir).expanduser())
        if steps:
            raise ConfigError(f"trainer.default_local_dir={trainer.default_local_dir} holds the checkpoints of an earlier run "
                              f"({_step_folders(steps)}), which trainer.resume_mode=disable would write over with this run's "
                              "steps and metrics; continue that run (trainer.resume_mode=auto), give this one another "
                              "trainer.default_local_dir, or delete the folder")
        return None
    if trainer.resume_mode == "resume_path":
        folder = Path(trainer.resume_from_path).expanduser()
        if not STEP_FOLDER.match(folder.name) or not folder.is_dir():
            raise ConfigError(f"trainer.resume_from_path={trainer.resume_from_path} is not an existing global_step_<N> folder; name "
                              "one that a run saved under its trainer.default_local_dir, or use trainer.resume_mode=auto")
        return folder
    run_dir = Path(trainer.default_local_dir)
    clean_stale(run_dir)  # puts back the old copy of a step whose new copy never arrived
    tracker = run_dir / TRACKER
    if tracker.exists() and not tracker.is_file():
        raise ConfigError(f"{tracker} should be the file holding the step of the latest checkpoint, but it is a folder; "
                          "remove it (resuming then takes the newest global_step_<N> folder) or write that file in its place")
    if not tracker.is_file():
        steps = [step for step in saved_steps(run_dir) if _holds_files(run_dir / f"global_step_{step}")]
        if not steps:
            return None
        # copied without it, or killed between a first save and its tracker: the newest step, not a fresh start over them
        if os.environ.get("RANK", "0") == "0":  # one process of a torchrun (reinforge sft) says so and writes the file back
            print(f"reinforge: note: {run_dir} holds checkpoints ({_step_folders(steps)}) but no {TRACKER}; resuming the "
                  f"newest, global_step_{steps[-1]}, and writing the file (another: trainer.resume_mode=resume_path "
                  "trainer.resume_from_path=...)", flush=True)
            # under a name of this process's: the other ranks' clean_stale removes the usual one
            _write_atomic(tracker, f"{steps[-1]}\n", tracker.with_name(f".{TRACKER}.{os.getpid()}.tmp"))
        return run_dir / f"global_step_{steps[-1]}"
    try:
        text = tracker.read_text(errors="replace").strip()  # not UTF-8: shown with replacement characters
    except OSError as error:
        raise unreadable(tracker, error) from None
    folder = run_dir / f"global_step_{text}"
    if not text.isdigit():
        raise ConfigError(f"{tracker} should hold the step of the latest checkpoint, but holds {text!r}; write the step of "
                          f"one of the global_step_<N> folders there, or resume one with trainer.resume_mode=resume_path")
    if not folder.is_dir():
        raise ConfigError(
            f"{tracker} names step {text!r} but {folder} does not exist; fix the file, or resume another step with "
            "trainer.resume_mode=resume_path trainer.resume_from_path=<run folder>/global_step_<N>"
        )
    return folder


def _holds_files(folder: Path) -> bool:
    """Whether a step folder has anything in it (an empty one, made by hand or copied in part, is no checkpoint)."""
    try:
        return any(folder.iterdir())
    except OSError:  # not readable: resuming it names the problem
        return True


def save_step_record(folder: Path, metrics: dict) -> None:
    """The step's metrics so far (the save's timing included) in its step folder: a run stopped after the save but before
    it logged the step (in the step's validation, say) logs them when it resumes (`read_step_record`)."""
    _write_atomic(folder / STEP_RECORD,
                  json.dumps({k: str(v) if isinstance(v, float) and not math.isfinite(v) else v for k, v in metrics.items()}))


def read_step_record(folder: Path) -> dict | None:
    """The metrics `save_step_record` kept in `folder`; None when there are none (saved before they were kept)."""
    file = folder / STEP_RECORD
    if not file.is_file():
        return None
    try:
        record = json.loads(file.read_text())
    except (OSError, ValueError) as error:
        print(f"reinforge: warning: {file} cannot be read ({type(error).__name__}: {str(error)[:120]}), so the metrics of "
              f"the step it saved are not logged", file=sys.stderr, flush=True)
        return None
    return {k: float(v) if v in ("nan", "inf", "-inf") else v for k, v in record.items()} if isinstance(record, dict) else None


def read_trainer_state(folder: Path) -> tuple[dict, dict]:
    """The data loader's state (data.pt) and the trainer's (trainer_state.json) of a step folder; a file that cannot be
    read is a CheckpointError naming it."""
    import torch

    try:
        loader_state = torch.load(folder / "data.pt")
    except UNREADABLE as error:
        raise damaged(folder / "data.pt", error) from error
    try:
        state = json.loads((folder / "trainer_state.json").read_text())
        state["global_steps"], state["kl_ctrl"] = int(state["global_steps"]), dict(state["kl_ctrl"])
        state["kl_ctrl"]["value"] = float(state["kl_ctrl"]["value"])  # the KL coefficient
        if STEP_FOLDER.match(folder.name) and state["global_steps"] != step_of(folder):
            raise ValueError(f"it holds step {state['global_steps']}, its folder is {folder.name}")
    except (ValueError, TypeError, KeyError) as error:
        raise damaged(folder / "trainer_state.json", error) from error
    return loader_state, state


def damaged(file: Path, error: BaseException, advice: str | None = None) -> CheckpointError:
    """The error for a checkpoint file that cannot be read (a save cut short, a disk fault, a file copied in part),
    ending with `advice` (by default, how to resume from another step)."""
    step = next((part for part in Path(file).parts if part.startswith("global_step_")), None)
    if advice is None:
        advice = (f"Resume an earlier step than {step}" if step else "Resume an earlier step") + (
            " (trainer.resume_mode=resume_path trainer.resume_from_path=<run folder>/global_step_<N>), or start afresh in "
            "another trainer.default_local_dir")
    if isinstance(error, ChangedFile):  # found by the checksums: the file reads, but not as saved
        return CheckpointError(f"{file} is damaged: {error}. {advice}")
    return CheckpointError(f"{file} is damaged and cannot be read ({type(error).__name__}: {str(error)[:200]}). {advice}")


class ChangedFile(ValueError):
    """A checkpoint file that is gone or whose bytes are not those saved (checksums.json)."""


def _step_folders(steps: list[int]) -> str:
    return ", ".join(f"global_step_{step}" for step in steps[:3]) + (f" ... global_step_{steps[-1]}" if len(steps) > 3 else "")


def _saved_by_verl(fsdp_config: Path) -> bool:
    """verl writes fsdp_config.json beside its rank files; reinforge's (one rank's, for verl's merger) says it is its own."""
    if not fsdp_config.is_file():
        return False
    try:
        return json.loads(fsdp_config.read_text()).get("saved_by") != "reinforge"
    except (ValueError, AttributeError):
        return True


def loads_of(config) -> dict[str, list | None]:
    """What resuming loads of each role, by the run's config (its checkpoint.load_contents), for `check_resume_folder`."""
    return {"actor": config.actor_rollout_ref.actor.checkpoint.load_contents, "critic": config.critic.checkpoint.load_contents}


def check_resume_folder(folder: Path, critic: bool, loads: dict[str, list] | None = None) -> tuple[dict, dict]:
    """Before anything loads: ConfigError naming what `folder` lacks of what resuming needs (the critic's only with `critic`),
    CheckpointError naming a file of it that is not whole or not as saved (of the parts each role loads, `loads`: role ->
    its checkpoint.load_contents; default all); else its data loader's and trainer's states (`read_trainer_state`)."""
    from reinforge.training.checkpoint_io import PARTS

    roles = ["actor", "critic"] if critic else ["actor"]
    loads = {role: (loads or {}).get(role) or list(PARTS) for role in roles}
    prefixes = {role: tuple(f"{PARTS[part]}_world_size_" for part in loads[role] if part in PARTS) for role in roles}
    for path in [folder, *(folder / role for role in roles), *(folder / role / "huggingface" for role in roles)]:
        if path.is_dir() and not os.access(path, os.R_OK | os.X_OK):  # its files would look missing
            raise unreadable(path, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
    missing = [f"{name}/" for name in roles if not (folder / name).is_dir()]
    missing += [name for name in ("data.pt", "trainer_state.json") if not (folder / name).is_file()]
    if not missing:
        read = [folder / "data.pt", folder / "trainer_state.json"]  # and of each role, the parts it loads
        for role in roles:
            read += [folder / role / "huggingface" / "config.json"] if "model" in loads[role] else []
            read += sorted(file for file in (folder / role).glob("*.pt") if file.name.startswith(prefixes[role]))
            read += [folder / name for name in checksums_of(folder) if name.startswith(f"{role}/") and name.endswith(".pt")
                     and name.split("/")[-1].startswith(prefixes[role])]
        for file in read:
            if file.is_file() and not os.access(file, os.R_OK):
                raise unreadable(file, PermissionError(errno.EACCES, os.strerror(errno.EACCES)))
        verify_files(dict.fromkeys(read))
        for file in dict.fromkeys(file for file in read if file.suffix == ".pt" and file.is_file()):  # zip archives
            if not zipfile.is_zipfile(file):
                raise damaged(file, ValueError("not a complete torch.save archive"))
        return read_trainer_state(folder)
    if "trainer_state.json" in missing and _saved_by_verl(folder / "actor" / "fsdp_config.json"):
        what = ("it is a verl checkpoint (actor/fsdp_config.json, no trainer_state.json), not a reinforge one; "
                "reinforge resumes only its own checkpoints")
    else:
        what = "it has no " + ", ".join(f"{name} (this run trains a critic)" if name == "critic/" else name for name in missing)
    raise ConfigError(f"{folder} is not a checkpoint this run can load: {what}. Resume another global_step_<N> folder that "
                      "reinforge saved (trainer.resume_mode=resume_path trainer.resume_from_path=<folder>), or start "
                      "afresh in another trainer.default_local_dir")


def step_of(folder: Path) -> int:
    return int(STEP_FOLDER.match(folder.name).group(1))
