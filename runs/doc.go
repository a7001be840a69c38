// Package runs makes every execute_code run an object with one identity
// that can be started, looked at, waited for, read and stopped, and that
// outlives the call that started it and the server process itself.
//
// A Manager keeps the runs in flight in memory (their live output, a done
// channel, a cancel func) and writes every record to a Store, an embedded
// bbolt database in the data directory, as it changes: when it is queued,
// when it starts, its output every FlushEvery while it runs, and its final
// state, output, files and network log when it ends. After a crash or a
// restart, runs that were in flight are marked interrupted. Finished runs
// are kept for Retention and within MaxTotalBytes, oldest removed first.
//
// How a run executes (queue, egress proxy identity, sandbox) is the
// caller's: Spec.Exec. Files a run leaves in its scratch directory's out/
// are read with CollectFiles, which follows no symbolic link and keeps
// only regular files within the size caps, with a note for anything left
// out.
package runs
