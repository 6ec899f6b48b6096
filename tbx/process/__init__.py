"""What a process needs from its operating system, below every other layer but errors: who owns a thing and
whether that process is gone (`owner`), bounded waits that a hang cannot outlive (`waits`), a server that
learns its port (`listen`), the job's preemption signal taken where the event loop can unwind
(`preemption`), and files written whole or not at all (`durable`)."""
