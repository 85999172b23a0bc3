// Package syncsafe is the safe layer between the bridge and a synced folder
// that is hostile and only eventually consistent. It knows nothing of
// requests, keys or manifests: it names files, classifies foreign ones, reads
// and publishes files without being tricked, judges completeness by hash,
// locks state files and watches the tree.
//
// Entry points:
//   - [OpenFolder] → [Folder]: rooted access ([Folder.ReadFile], [Folder.Open],
//     [Folder.List], [Folder.Lstat]) and atomic publication ([Folder.Publish],
//     [Folder.PublishReplace]); [CheckMarker] before acting on a folder.
//   - [Settle]: the only way a payload is judged complete.
//   - [NewWatcher] → [Watcher.Next]: batches of paths that may have changed,
//     with periodic and loss-triggered full walks.
//   - [ValidName], [Classify], [ConflictOf]: names; [Lock]: sidecar locks.
//
// # Names
//
// [ValidName] accepts a single path component iff it matches
// ^[a-z0-9][a-z0-9._-]{0,63}$ (lower-case ASCII, 1 to 64 bytes, starting
// with a letter or digit) and none of the following holds:
//   - it ends in ".", "~", ".tmp", ".part", ".filepart" or ".partial";
//   - it contains "..", ".nosync", ".unison", ".sync-conflict-",
//     "_conflict-" or "_vti_";
//   - it is "desktop.ini", "thumbs.db" or "ehthumbs.db";
//   - its part before the first "." is a Windows device name: con, prn,
//     aux, nul, com0-com9, lpt0-lpt9 ("con", "con.txt", "com1.tar.gz").
//
// Every file and directory the bridge creates passes ValidName (Publish,
// MkdirAll and Remove enforce it per component), so no client skips,
// renames or refuses it on any OS. Callers should accept peer files only by a
// narrower structural pattern (e.g. ^[0-9a-f]{32}\.manifest$, stem equal to
// the signed id).
//
// [Classify] sorts any name into ours, temp, conflict, placeholder, litter or
// unknown, naming the client and, when the pattern reveals it, the original
// name (patterns: classify.go; sync-clients.md §2). Nothing but KindOurs is
// ever parsed, and foreign files are never deleted. OneDrive's
// "NAME-HOST.EXT" copy looks like a valid name when the host name is
// lower-case; [ConflictOf] detects it given the set of known names, but the
// caller's structural allowlist is the real defence.
//
// # Marker
//
// A bridge folder has a regular file [MarkerName] ("bridge.folder") at its
// root holding exactly [MarkerContent] ("syncbridge folder v1\n"). Without it
// [CheckMarker] fails with [ErrNoMarker]: an unmounted, empty or not yet
// synced folder must never be read as "everything was deleted". So does a
// marker holding a beginning of that content (a sync client that writes in
// place is still copying it). Other content is an error naming it. [WriteMarker] creates it without replacing.
//
// # Publishing
//
// [Folder.Publish] stages the content in a temp file created 0600 with
// O_EXCL, writes, fsyncs and closes it, moves it to the final name without
// replacing anything ([ErrExists]), and fsyncs the directory. With
// [WithStaging] the temp lives in that directory, outside the synced folder
// on the same filesystem, so no sync client ever sees it; otherwise (and
// after an EXDEV, which switches the Folder to it for good) it is
// "~$<name>.tmp" in the target directory, a name OneDrive, iCloud,
// Nextcloud and Dropbox skip and the peer's allowlist rejects. The move is
// renameat2(RENAME_NOREPLACE) on Linux, link+unlink elsewhere, retried for
// up to 2 s on busy-file errors. Temps are removed on every error path;
// [Folder.SweepTemps] and [Folder.SweepStaging] remove leftovers of a crash
// at start-up. [Folder.PublishReplace] is the same with a replacing rename,
// for files only this side owns.
//
// # Security
//
//   - All folder access goes through an [os.Root]: "..", absolute paths and
//     symlinks pointing out of the folder cannot escape it. Beyond that no
//     symlink is followed at all: parent components must be directories and
//     final components are examined with Lstat.
//   - Reads: Lstat must show a regular file (else [ErrNotRegular]) within the
//     caller's cap (else [ErrTooLarge]) before anything is opened; the open
//     is non-blocking (a FIFO swapped in cannot hang the daemon); the opened
//     file is fstat'ed and must be the same, still regular file within the
//     cap; at most cap+1 bytes are read.
//   - Completeness is hash-complete only: [Settle] copies exactly the pinned
//     length into a caller-owned spool while hashing, requires EOF right
//     after, and compares SHA-256 ([ErrUnsettled] otherwise). The caller reads
//     the spool, never the folder file again. Stable size or mtime is a hint
//     for when to try, never admission.
//   - The watcher is a hint: notify drops events silently (full channel,
//     inotify overflow, new-directory race), so [Watcher.Next] walks the tree
//     fully at start, every Rescan, and whenever the channel was found more
//     than half full or the pending set outgrew its bound. Event batches drop
//     temp and litter names; Full batches list every regular file.
//   - [Lock] is flock(2) on a sidecar file (Windows: a no-share open), held
//     by the open file description and released by the kernel when the
//     process dies; [ErrLocked] names the holder's pid.
//   - Nothing here deletes or renames a file it did not create: Remove and
//     the sweeps accept only our names.
//
// # Compatibility
//
// Linux is the primary platform (renameat2, inotify). Other Unix systems use
// link+unlink and the portable notify events; macOS with cgo subscribes to
// the FSEvents loss flags. On Windows WithStaging is ignored (temps are
// staged in the folder) and publication uses a hard link to refuse
// overwriting.
package syncsafe
