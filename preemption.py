"""How a training run stops before its end: a preemption notice (SIGTERM) saves first, a lost worker is named.

Preemption: cloud machines and TPU VMs get a SIGTERM some seconds before they are taken away. While
`PreemptionNotice.watch()` is active (training.train, from building the model to its end), a SIGTERM sets this
worker's flag at once, from a thread (the main thread may be inside a long TensorFlow call, or tracing one); the
loop reads the flags after every step, agreed between the workers by an all-reduce, so every worker stops after
the same step; the chief saves a checkpoint there and the run ends with `Preempted` (exit status 143, as a
process ended by SIGTERM). A notice that comes after the last step's agreement ends the run too, once it is
saved. No step is lost: the same command resumes from the saved step, and with --deterministic ends as an
uninterrupted run would. The same all-reduce agrees on the end of a loop that a due progress line cuts short
(`agreed(strategy, also=...)`).

A lost worker: under a multi-worker strategy TensorFlow's coordination service hears a heartbeat from every
worker; one that sends none for its heartbeat timeout (10 s in TensorFlow 2.20 and 2.21), or whose connection
breaks, makes the collectives of every other worker fail. `lost_worker(err, ...)` turns that failure into
`WorkerLost` (exit status 75, EX_TEMPFAIL), naming the worker; the checkpoints written so far stay as they are, and
the same commands on every worker resume from the newest.
"""
import os
import re
import signal
import threading

import tensorflow as tf
from absl import logging

import cli

PREEMPTED_EXIT_STATUS = 128 + signal.SIGTERM
WORKER_LOST_EXIT_STATUS = 75


class Preempted(cli.Stopped):
    prefix = "preempted"
    exit_status = PREEMPTED_EXIT_STATUS


class WorkerLost(cli.Stopped):
    exit_status = WORKER_LOST_EXIT_STATUS


def _tasks(strategy):
    """(job, index) of every worker of a multi-worker strategy's cluster, the chief first; [] for other strategies."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
        return []
    jobs = resolver.cluster_spec().as_dict()
    return [(job, i) for job in ("chief", "worker") if job in jobs for i in range(len(jobs[job]))]


def _task_name(job, index):
    """A worker's name in messages: "chief", "worker 1"."""
    return job if job == "chief" else f"{job} {index}"


def _workers(strategy):
    """(this worker's index in _tasks, the number of workers) of a strategy."""
    tasks = _tasks(strategy)
    if len(tasks) < 2:
        return 0, 1
    resolver = strategy.cluster_resolver
    return tasks.index((resolver.task_type, resolver.task_id)), len(tasks)


def worker_names(strategy):
    """Names of the workers in PreemptionNotice's order ("chief", "worker 1"), for messages."""
    tasks = _tasks(strategy)
    return [_task_name(*task) for task in tasks] if len(tasks) > 1 else ["this worker"]


class PreemptionNotice:
    """One flag per worker, set by a SIGTERM on that worker; the training loop reads them all after every step."""

    def __init__(self, strategy):
        self.index, self.num_workers = _workers(strategy)
        self.multi_worker = self.num_workers > 1
        self.flags = tf.Variable(tf.zeros([self.num_workers]), trainable=False, name="preemption_notice")
        self.received = False

    def none(self):
        return tf.zeros([self.num_workers])

    def agreed(self, strategy, also=None):
        """The flags as every worker sees them after a step (an all-reduce under a multi-worker strategy). With
        `also`, a float32 scalar of this worker's (the training loop's "a progress line is due"), returns (flags,
        `also` summed over the replicas of every worker) from the same all-reduce: positive on every worker as soon
        as it is on one, so that all end a loop after the same step."""
        if not self.multi_worker:
            flags = self.flags.read_value()
            return flags if also is None else (flags, also)
        if also is None:
            per_replica = strategy.run(lambda: tf.identity(self.flags.read_value()))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        per_replica = strategy.run(lambda: tf.concat([self.flags.read_value(), tf.reshape(also, [1])], 0))
        summed = strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)
        return summed[:self.num_workers], summed[self.num_workers]

    def _notice(self):
        if not self.received:
            self.received = True
            logging.warning("Preemption notice (SIGTERM): training stops after the step in progress and saves a "
                            "checkpoint there")
        self.flags.assign(tf.one_hot(self.index, self.num_workers))

    def watch(self):
        """A context manager: inside it, a SIGTERM sets this worker's flag (outside, SIGTERM ends the process)."""
        return _Watch(self)


class _Watch:
    """SIGTERM through signal.set_wakeup_fd: the signal's number is written to a pipe the moment it arrives, and
    a thread reading the pipe sets the flag, while the main thread may be inside a training loop of many steps."""

    def __init__(self, notice):
        self.notice = notice
        self.active = False

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            logging.info("Training outside the main thread: a SIGTERM is not turned into a checkpoint")
            return self
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.write_fd, False)
        # The handler itself does nothing: Python runs it in the main thread, maybe inside a trace, where
        # TensorFlow ops would join the traced graph. The wakeup fd wakes the thread, which sets the flag.
        self.previous_handler = signal.signal(signal.SIGTERM, lambda signum, frame: None)
        self.previous_fd = signal.set_wakeup_fd(self.write_fd, warn_on_full_buffer=False)
        self.thread = threading.Thread(target=self._read, name="preemption-notice", daemon=True)
        self.thread.start()
        self.active = True
        return self

    def _read(self):
        while True:
            try:
                data = os.read(self.read_fd, 64)
            except OSError:
                return
            if not data:
                return
            if signal.SIGTERM in data:
                self.notice._notice()

    def __exit__(self, *exc):
        if not self.active:
            return
        signal.set_wakeup_fd(self.previous_fd)
        signal.signal(signal.SIGTERM, self.previous_handler)
        os.close(self.write_fd)  # the reader sees the end of the pipe and stops
        self.thread.join(timeout=5)
        os.close(self.read_fd)
        self.active = False


def preempted(notice_flags, strategy, step, saved):
    """Preempted naming the workers that had a notice and what was saved at `step`."""
    names = worker_names(strategy)
    if len(names) == 1:
        notice = "a preemption notice (SIGTERM) arrived"
    else:
        notice = "a preemption notice (SIGTERM) reached " + ", ".join(
            name for name, flag in zip(names, notice_flags) if flag > 0)
    kept = "saved" if saved else "the chief saved"
    return Preempted(f"{notice}; stopped at global step {step} and {kept} model.ckpt-{step} in --output_dir (no "
                     f"step lost): run the same command again to resume")


_TASK = re.compile(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)")
# What TensorFlow's errors say when a peer's connection breaks, and when a worker is lost in any way.
_BROKEN_CONNECTION = ("Connection reset", "Socket closed", "failed to connect", "Connection refused")
_LOST = ("stopped sending heartbeats", "Collective ops is aborted") + _BROKEN_CONNECTION


def raise_lost_worker(err, strategy, when, newest_checkpoint=None):
    """Raises lost_worker(...) for a TensorFlow error that says a worker went away, else err itself (in an
    `except` block: the error goes on as it was)."""
    lost = lost_worker(err, strategy, when, newest_checkpoint)
    if lost is None:
        raise err
    raise lost from None


def lost_worker(err, strategy, when, newest_checkpoint=None):
    """WorkerLost for a TensorFlow error that says a worker of a multi-worker run went away (`when`: e.g. "after
    global step 30"), else None."""
    if _workers(strategy)[1] == 1 or not isinstance(err, tf.errors.OpError):
        return None
    message = getattr(err, "message", str(err))
    if not isinstance(err, tf.errors.UnavailableError) and not any(text in message for text in _LOST):
        return None
    resolver = strategy.cluster_resolver
    mine = (resolver.task_type, resolver.task_id)
    lost = []
    for job, index in _TASK.findall(message):
        name = _task_name(job, index)
        if (job, int(index)) != mine and name not in lost:
            lost.append(name)
    why = ("it stopped sending heartbeats" if "heartbeat" in message else
           "its connection broke" if any(text in message for text in _BROKEN_CONNECTION) else
           message.splitlines()[0])
    kept = (f"the checkpoints in --output_dir up to {newest_checkpoint} are kept"
            if newest_checkpoint else "the chief's checkpoints in --output_dir are kept")
    return WorkerLost(f"lost {', '.join(lost) or 'another worker'} of the cluster {when} ({why}); "
                      f"{kept}: start the same command on every worker again to resume")
