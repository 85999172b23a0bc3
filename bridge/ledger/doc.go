// Package ledger is the host daemon's durable memory of every request id. It
// guarantees two of the bridge's invariants: an id runs at most once, and
// the ledger is written before the effect (a state change is on disk before
// Transition returns, so the caller may act on it).
//
// Entry points:
//
//   - [Open] opens the ledger in a private state directory and locks it;
//     [Ledger.Close] releases it.
//   - [Ledger.Admit] records a new id, or returns the existing entry for a
//     duplicate, or fails with [ErrConflict] for the same id with another
//     manifest.
//   - [Ledger.Transition] is a compare-and-set of an entry's state; it is how
//     exactly one worker claims an id ([ErrWrongState] for the others).
//   - [Repair] makes a damaged file loadable again (`bridge ledger repair`).
//
// [Ledger.InState] lists the entries in some states (a start asks for what
// a crash may have interrupted: claimed, running); [Ledger.Settled] and
// [Ledger.Forget] let the daemon's collection forget terminal entries after
// their expiry; [Ledger.Get], [Ledger.Missing] and [Ledger.List] read.
//
// Terminal entries move out of memory into an archive file, in the
// background once 1,024 of them are in memory, and at every Open and Close
// (see "Archive" below); every method answers for them as before.
//
// # States
//
// seen, pending and awaiting-approval wait; claimed and running are in
// flight ([State.InFlight]); done, failed, rejected, expired and cancelled
// are terminal ([State.Terminal]) and final; uncertain marks a crashed,
// non-idempotent run that a human must resolve. Allowed transitions
// ([CanTransition]):
//
//	seen              → pending, awaiting-approval, claimed, rejected, expired, cancelled, failed, uncertain
//	pending           → awaiting-approval, claimed, rejected, expired, cancelled, failed, uncertain
//	awaiting-approval → claimed, rejected, expired, cancelled, failed, uncertain
//	claimed           → running, pending, failed, rejected, expired, cancelled, uncertain
//	running           → running, done, failed, cancelled, uncertain
//	uncertain         → claimed, done, failed, cancelled
//
// The daemon moves an id to claimed before anything else touches it and to
// running, durably, before it starts the process; done only after the
// result is durably published. So after a crash a claimed entry never started
// (claimed → pending or running is safe) and a running one may have had its
// effect (re-run only if Idempotent, else uncertain).
// claimed → pending releases a claim whose operation never started.
// running → running is an idempotent re-run after a crash; every entry into
// running increments Runs, so Runs counts execution starts. uncertain →
// claimed is an operator's decision to run again. [Ledger.Admit] may create
// an entry in seen, pending, awaiting-approval, rejected, expired,
// cancelled or uncertain, never in flight: claims go through the
// compare-and-set only. A request that never started may still end failed
// (the host could not prepare it) or uncertain (the ledger was found behind
// what the host did); which event takes which step is the host's request
// lifecycle (package host, docs/DESIGN.md §6).
//
// # Storage format
//
// The directory holds ledger.lock (the lock, with the holder's pid),
// ledger.db (the database), ledger.archive (terminal entries, below),
// ledger.db.checked (written after each
// compaction, and by Open once it checked more records: "bridge-ledger-checked
// v1 <bytes> <sha256 hex>", the prefix of ledger.db whose records Open need
// not check again while it hashes the same), ledger.db.damaged-<unix seconds> (copies kept by Repair) and,
// briefly, ledger.db.tmp (a rewrite before its rename).
//
// ledger.db is a BuntDB v1.3.0 append-only file: RESP commands
// `*N\r\n` followed by N bulk strings `$len\r\nbytes\r\n`, one `set` per
// write, `del` from GC. Keys:
//
//	m/format  "1"
//	r/<key>   one JSON record per request, the whole entry, rewritten on every transition
//
// A record has every field below, always, in this order, then at most the
// optional member named after it (canonical: a record that does not
// re-encode to the same bytes is damage):
//
//	{"v":1,"key":"<agent>/<id>","agent":"…","id":"…","state":"done","manifest_sha256":"…",
//	 "first_seen":T,"expires":T,"op":"…","idempotent":false,"result_sha256":"…","reason":"…",
//	 "updated":T,"runs":1,"history":[{"state":"seen","at":T},…]}
//
// T is UTC with nine fractional digits, "2006-01-02T15:04:05.000000000Z", so
// that string order is time order. history keeps the last 16 steps. A
// record of a request not yet answered, or uncertain, may end with one
// member more, ,"manifest":"<base64>" (standard, padded): the admitted
// manifest's bytes, whose SHA-256 is manifest_sha256 (Admit refuses others).
// The host writes its own copy of the manifest without an fsync and reads
// this one wherever it rebuilds the request (recovery, evaluation of a held
// request, approval, reconcile); entering a terminal state drops it, and a
// record written before the member existed has none and still reads. A
// manifest body is at most 16 KiB (SPEC §6), so such a record is at most about
// 22 KiB more; a typical one adds under 1 KiB.
//
// Why one key per request, written alone: a BuntDB transaction is one
// write(2) of all its records, and after a crash the loader applies every
// complete record, so a multi-key transaction can be half applied. A
// single-key write is all or nothing. (A move to the archive deletes in
// batches; a partly applied batch is still a valid set of deletions.)
//
// Why no TTL: BuntDB v1.3.0 drops an expired record at load time and the
// key's previous value comes back (#112): a done request would resurrect as
// running. No record ever carries an expiry; [Ledger.Forget] deletes explicitly,
// and a file holding an expiring record is refused as damaged.
//
// Durability: group commit. Writers that arrive together share one buntdb
// transaction (one write(2)) and one fsync, which the ledger does itself
// through its own descriptor, because buntdb ignores its fsync's error
// (#122); buntdb's SyncPolicy is Never. A write returns only after that
// fsync, and readers wait while a batch is between its write and its fsync,
// so nobody sees a state that is not on disk. On a failed fsync the calls
// of the batch fail and the Ledger refuses all further work until reopened.
// Lazy writes ([Ledger.AdmitLazy], [Ledger.TransitionLazy]) into seen,
// pending or claimed are the exception: a batch of only lazy writes is not
// fsynced, its callers return at once and everyone sees it; the next
// durable write (into any other state) or a clean Close fsyncs the file and
// so makes them durable too (the file is append-only). A crash may lose
// them, and their entries are then in the state before or absent: never in
// flight, so the daemon evaluates those requests again.
// [Ledger.Durable] tells whether a key has a lazy write not yet on disk.
//
// Napping: buntdb v1.3.0 runs a goroutine with a one-second ticker from Open
// to Close, whatever its configuration, and its ticks are most of an idle
// daemon's wake-ups. A ledger unused for five seconds fsyncs its lazy writes
// and closes buntdb, keeping its lock, its own descriptor and the archive;
// the next read or write opens buntdb again before it goes on, under the
// same lock that orders reads after fsyncs: a read of the whole file, its
// live records (the terminal ones among them until archiveEvery of them
// go to the archive in the background) and, until a nap rewrites it (past
// 1 MiB and twice its live records), the records they replaced. [Ledger.Naps]
// counts both.
// Within a batch the writes apply in order, each seeing the ones before it,
// so the compare-and-set holds; a crash may keep part of a batch, which is
// safe because each record stands alone and no caller was answered yet.
// Auto-shrink is off (it renames an un-fsynced file over the database and
// panics on Windows, #119). Instead Open rewrites the file when it exceeds
// 16 MiB and four times its live size, and a clean Close when it exceeds
// 1 MiB and twice its live size (so the next start reads live records
// only): new file, fsync, rename, fsync the directory.
//
// Open reads every byte first, stricter than BuntDB's loader. Records in
// the prefix ledger.db.checked vouches for (by its SHA-256) were checked
// when they were written or last opened, and are not decoded again; every
// other record is. The ledger never writes a record that would not read
// back (putEntry decodes each before it writes it; times are clamped into
// the years the format can write), so what a compaction vouches for was
// checked too.
//
//	end of file inside a record, NUL bytes after the last   cut back to the last complete record, fsynced
//	record (a crash), or a record prefix followed by NULs   (its length is kept); that write never returned
//	anything else: garbage, an unknown command or key,      ErrDamaged, file untouched; run Repair
//	an expiring or non-canonical record, NUL bytes
//	followed by more records
//
// [Repair] copies the file aside, then keeps every valid record before the
// first invalid byte (a truncation, or a rewrite if NUL runs sit between
// records) and reports bytes kept and dropped and entries recovered.
//
// # Archive
//
// buntdb holds every record in memory, and a daemon beside 100,000
// finished requests held 100 MB of them. A terminal entry never changes
// again, so the ledger moves terminal entries to ledger.archive and keeps
// only an index in memory (key, offset, length, state, Updated and
// Expires: about 140 bytes with the map's share, against about 1 KB).
// Reads that find no record in buntdb look in the index and read the
// record from the file; lists merge both in key order.
//
// ledger.archive is append-only RESP as well: `set m/format 1` first, then
// `*4` `set r/<key> <record> <crc>` per archived entry and `*3` `del
// r/<key> <crc>` per entry GC or Forget dropped (crc: CRC-32C of the record,
// or of "r/<key>", 8 lower-case hex digits). ledger.db records the
// archive's length as of the last move or compaction (`set m/archive
// <bytes>`, so an earlier version refuses a ledger that has an archive).
// Open checks every command's frame and CRC, the record's key, a terminal
// state and its two times (not a full decode: a tenth of the time), and a
// del's key among those set; reads check the CRC again and decode. A torn
// tail (a valid prefix of a command, or NULs, up to the end) is cut; any
// other damage, an archive shorter than the recorded length, or a missing
// one beside a ledger.db that records one is ErrDamaged. (Cutting damage
// past the recorded length without a word, as a move a power cut
// interrupted would need, let one flipped byte hide lost records: a second
// red team's finding. Repair cuts it instead, losing nothing.) [Repair]
// copies a damaged archive to ledger.archive.damaged-<unix seconds>, keeps
// every valid command (a bad record whose frame holds is dropped alone),
// creates a missing one empty, and records the length it left.
//
// A move appends the records and fsyncs the archive, then deletes them
// from buntdb and records the new length in one durable commit: a crash
// between leaves an entry in both, never in neither. Open settles such
// entries: the archive's terminal record stands over a buntdb record that
// is not terminal if it continues it (the same manifest and first
// sighting, updated no earlier: ledger.db repaired or restored behind it);
// otherwise buntdb's is newer (the id was forgotten and admitted again)
// and the archived copy is dropped; a terminal one in both is moved again.
// Snapshot answers as Open will settle. GC and Forget delete from buntdb,
// then append `del`s (for an archived copy of what they deleted too) and
// fsync. Moves and deletions take one lock, so no move brings back an
// entry GC just dropped. Open and Close rewrite an archive that is mostly
// dropped entries (the thresholds of ledger.db), checking every CRC on the
// way and recording the new length before the rename (a failed one at
// Open keeps the old file). A failed append is
// cut back before anything else is appended; a failed move loses nothing
// (the entries stay in memory) and is tried again.
//
// # Locking
//
// BuntDB has no locking, and two writers destroy the file. Open and Repair
// take an exclusive, non-blocking lock on the sidecar ledger.lock (flock on
// Unix, a share-nothing handle on Windows), not on ledger.db, whose inode a
// rewrite replaces. A second Open, in this process or another, fails with
// [ErrLocked] in an [*Error] naming the holder's pid (unknown on Windows)
// with a hint. The operating system releases the lock when the holder dies:
// no stale locks. The directory must be on a local file system.
//
// # Security
//
// The ledger lives in the host's private state directory, never in the
// synced folder: a peer or the sync provider must not be able to roll it
// back and re-enable replays. Open creates the directory with mode 0700 and
// refuses one that group or others may write; ledger.db, ledger.lock and the
// repair copies are 0600. Records hold ids, hashes, op names and reasons;
// callers must not put arguments, payloads or secrets in Reason. Keys are
// checked (non-empty, at most
// 512 bytes, UTF-8, no control characters) and the ledger never trusts a
// caller to have validated. Forgetting an id is the only way to let it run
// again, so GC deletes only terminal entries whose signed expiry plus skew
// has passed; the caller must reject expired manifests before Admit.
//
// # Compatibility
//
// The file format is version 1 (m/format and every record's "v"). A reader
// refuses any other version instead of guessing.
package ledger
