"""A training process whose checkpoint saves the test kills with SIGKILL (run by test_kill_during_save.py).

`python -m tests.trainer.save_under_kill '<overrides as JSON>'` builds the real run (reinforge's
`run`: tiny model, optimizer, data loader, trainer), trains one step so that the optimizer has
state, saves steps 1 and 2, then answers commands on stdin, one JSON line each on stdout
(prefixed "KILLTEST "). Before saving step s every parameter is set to s, so a checkpoint's
content shows which step it holds.

    count S          save step S in a forked child that lists the filesystem operations of the save
    event S J        save step S in a forked child that SIGKILLs itself just before operation J
    after S SECONDS  save step S in a forked child that this process SIGKILLs SECONDS after it starts
    save S           save step S here, to the end
    resume           load the checkpoint the tracker names, as a resumed run does

The filesystem operations are Python's audit events for them (opening a file for writing,
mkdir, rename, rmtree, remove, rmdir); torch and the tokenizer write some files from native code,
which raises no event, so a kill "before operation J" lands between those writes, and the timed
kills land anywhere, inside them too. Forked children skip the interpreter's exit handlers.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import torch

FS_EVENTS = ("open", "os.mkdir", "os.rename", "shutil.rmtree", "os.remove", "os.rmdir")


def fs_operation(event: str, args: tuple) -> str | None:
    """A short description of a filesystem operation that changes something, or None."""
    if event not in FS_EVENTS:
        return None
    if event == "open":
        mode, flags = args[1], args[2]
        writes = any(c in mode for c in "wax+") if isinstance(mode, str) else bool(flags & (os.O_WRONLY | os.O_RDWR))
        if not writes:
            return None
    return f"{event} {' '.join(os.path.basename(str(a)) for a in args[:2] if isinstance(a, (str, os.PathLike)))}"


def writer(fd: int):
    """on_event that writes each operation's description to `fd`, one a line."""
    return lambda description: os.write(fd, (description + "\n").encode())


def killer(target: int):
    """on_event that SIGKILLs this process just before operation number `target` (from 0)."""
    seen = 0

    def kill_at(description: str) -> None:
        nonlocal seen
        if seen == target:
            os.kill(os.getpid(), signal.SIGKILL)
        seen += 1

    return kill_at


def reply(**answer) -> None:
    print("KILLTEST " + json.dumps(answer), flush=True)


def serve(trainer) -> dict:
    model = trainer.actor_rollout_wg.workers[0].actor.model
    torch.set_num_threads(1)  # forked children then never touch an OpenMP pool the parent started

    def save_as(step: int) -> None:
        trainer.global_steps = step
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float(step))
        trainer._save_checkpoint()

    def in_child(step: int, on_event=None, started=None) -> int:
        """Fork; the child saves `step` (calling on_event(description) before each operation) and exits 0."""
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                if on_event is not None:
                    sys.addaudithook(lambda event, args: (d := fs_operation(event, args)) and on_event(d))
                if started is not None:
                    os.write(started, b"s")
                save_as(step)
            finally:
                os._exit(0)
        return pid

    trainer.global_steps = 1
    trainer.train_step(next(trainer.prompt_stream))
    save_as(1)
    save_as(2)
    reply(ready=True)
    for line in sys.stdin:
        command, *args = line.split()
        if command == "count":
            read, write = os.pipe()
            start = time.perf_counter()
            pid = in_child(int(args[0]), on_event=writer(write))
            os.close(write)
            with os.fdopen(read) as events:
                listed = events.read().splitlines()
            os.waitpid(pid, 0)
            reply(events=listed, seconds=time.perf_counter() - start)
        elif command == "event":
            _, status = os.waitpid(in_child(int(args[0]), on_event=killer(int(args[1]))), 0)
            reply(killed=os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL)
        elif command == "after":
            read, write = os.pipe()
            pid = in_child(int(args[0]), started=write)
            os.read(read, 1)
            time.sleep(float(args[1]))
            os.kill(pid, signal.SIGKILL)
            _, status = os.waitpid(pid, 0)
            os.close(read), os.close(write)
            reply(killed=os.WIFSIGNALED(status))
        elif command == "save":
            save_as(int(args[0]))
            reply(saved=True)
        elif command == "resume":
            trainer._load_checkpoint()
            reply(global_steps=trainer.global_steps, weight=next(model.parameters()).flatten()[0].item())
    return {}


if __name__ == "__main__":
    from reinforge.config import load_config
    from reinforge.trainer.main import run
    from reinforge.trainer.ppo_trainer import RLTrainer

    RLTrainer.fit = serve  # the run is built as for training; then this process serves the test's commands
    config, keys = load_config(json.loads(sys.argv[1]))
    run(config, keys)
