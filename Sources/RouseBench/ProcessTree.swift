import Foundation
import Glibc

/// CPU time and memory of a process and every process under it, read from `/proc`, so a server
/// made of several processes (Kamailio's receivers and workers, PostgreSQL's backends) is measured
/// as a whole, the same way as a one-process server (Rouse).
///
/// Memory is the proportional set size (`Pss` of `/proc/PID/smaps_rollup`): a page shared by n
/// processes counts 1/n in each, so the sum over the tree counts Kamailio's shared memory once.
/// Stateless; thread-safe.
enum ProcessTree {
    /// `pid` and its descendants, alive now.
    static func members(of root: pid_t) -> [pid_t] {
        var children: [pid_t: [pid_t]] = [:]
        for (pid, parent) in parentsByProcess() { children[parent, default: []].append(pid) }
        var found: [pid_t] = []
        var pending = [root]
        while let next = pending.popLast() {
            found.append(next)
            pending += children[next] ?? []
        }
        return found
    }

    /// User plus system CPU seconds used so far by `root` and its descendants (threads included),
    /// and by the children `root` has reaped (its `cutime` and `cstime`), so the figure does not
    /// drop when a child (a PostgreSQL backend) exits between two readings; nil when `root` is gone.
    static func cpuSeconds(of root: pid_t) -> Double? {
        guard let rootFields = processStat(root), rootFields.count > 14 else { return nil }
        var total = (Double(rootFields[13]) ?? 0) + (Double(rootFields[14]) ?? 0)
        for pid in members(of: root) {
            guard let fields = processStat(pid), fields.count > 12, let user = Double(fields[11]), let system = Double(fields[12])
            else { continue }
            total += user + system
        }
        return total / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Proportional set size of `root` and its descendants, in bytes; nil when `root` is gone.
    static func proportionalBytes(of root: pid_t) -> Double? {
        guard processStat(root) != nil else { return nil }
        var kilobytes = 0.0
        for pid in members(of: root) {
            guard let rollup = try? String(contentsOfFile: "/proc/\(pid)/smaps_rollup", encoding: .utf8) else { continue }
            for line in rollup.split(separator: "\n") where line.hasPrefix("Pss:") {
                let parts = line.split(separator: " ", omittingEmptySubsequences: true)
                if parts.count >= 2, let value = Double(parts[1]) { kilobytes += value }
            }
        }
        return kilobytes * 1_024
    }

    /// The fields of `/proc/PID/stat` after "pid (comm) ": state is index 0, ppid 1, utime 11,
    /// stime 12, cutime 13, cstime 14.
    private static func processStat(_ pid: pid_t) -> [Substring]? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let closing = stat.lastIndex(of: ")")
        else { return nil }
        return stat[stat.index(after: closing)...].split(separator: " ")
    }

    private static func parentsByProcess() -> [(pid_t, pid_t)] {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else { return [] }
        var pairs: [(pid_t, pid_t)] = []
        for entry in entries {
            guard let pid = pid_t(entry), let fields = processStat(pid), fields.count > 1, let parent = pid_t(fields[1]) else { continue }
            pairs.append((pid, parent))
        }
        return pairs
    }
}

/// The PostgreSQL cluster of a benchmark database, found from its conninfo (`host=` names the
/// socket folder; `make bench` keeps the data in `host/data`), so the CPU its backends spend on a
/// load is measured beside the server's own.
struct PostgresCluster {
    /// The postmaster's process id.
    let postmaster: pid_t

    /// nil when the conninfo names no socket folder with a readable `data/postmaster.pid`.
    init?(conninfo: String) {
        guard let host = ConninfoFields(conninfo).value("host"), host.hasPrefix("/"),
            let text = try? String(contentsOfFile: host + "/data/postmaster.pid", encoding: .utf8),
            let first = text.split(separator: "\n").first, let pid = pid_t(first.trimmingCharacters(in: .whitespaces))
        else { return nil }
        postmaster = pid
    }

    /// CPU seconds of the postmaster and every backend so far.
    func cpuSeconds() -> Double? {
        ProcessTree.cpuSeconds(of: postmaster)
    }
}

/// The `key=value` pairs of a libpq conninfo string (values without spaces or quotes, as
/// `scripts/pg.sh url` prints them).
struct ConninfoFields {
    private var values: [String: String] = [:]

    init(_ conninfo: String) {
        for pair in conninfo.split(separator: " ") {
            guard let equals = pair.firstIndex(of: "=") else { continue }
            values[String(pair[..<equals])] = String(pair[pair.index(after: equals)...])
        }
    }

    func value(_ key: String) -> String? { values[key] }
}
