public import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A new folder of its own in the temporary directory (`$TMPDIR`, else /tmp) for a test's files,
/// removed with everything in it by `remove()` or when the last reference to it goes (`deinit`).
///
/// XCTest keeps every test case object until the whole run ends, so a folder held by a test case
/// property must be removed in `tearDown` (which also runs when `setUp` threw); one held by a local
/// value goes at the end of its scope. Thread-safe; `remove()` is idempotent.
public final class TemporaryFolder: @unchecked Sendable {
    /// Why the folder could not be made.
    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// Its absolute path (no trailing slash).
    public let path: String

    private let lock = NSLock()
    private var removed = false

    /// Makes `<temporary directory>/<prefix>.XXXXXX` (mode 0700, `mkdtemp`). `mode` widens it, e.g.
    /// 0o755 for a folder another user (postgres) must reach.
    public init(prefix: String, mode: mode_t? = nil) throws {
        var template = Array((Self.temporaryDirectory + "/" + prefix + ".XXXXXX").utf8CString)
        guard let made = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw Failure(description: "cannot make a folder in \(Self.temporaryDirectory): \(String(cString: strerror(errno)))")
        }
        path = String(cString: made)
        if let mode { chmod(path, mode) }
    }

    /// `path` + "/" + `name`.
    public func file(_ name: String) -> String { path + "/" + name }

    /// Deletes the folder and everything in it.
    public func remove() {
        lock.lock()
        let already = removed
        removed = true
        lock.unlock()
        if !already { try? FileManager.default.removeItem(atPath: path) }
    }

    deinit { remove() }

    /// `$TMPDIR` without its trailing slash, else /tmp (what Foundation's `temporaryDirectory` uses).
    public static var temporaryDirectory: String {
        var directory = ProcessInfo.processInfo.environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
        while directory.count > 1 && directory.hasSuffix("/") { directory.removeLast() }
        return directory
    }
}

/// A file in a `TemporaryFolder` of its own: removed with the folder, by `remove()` or when the last
/// copy of this value goes.
public struct TemporaryFile: Sendable {
    public let path: String
    public let folder: TemporaryFolder

    /// Deletes the file (the folder).
    public func remove() { folder.remove() }
}
