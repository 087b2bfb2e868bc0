import CallRouting
import Foundation
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import Storage
import XCTest

/// Issue 17 item 2: two instances on one PostgreSQL, and instance A's database connections cut
/// while B changes the bindings and posted tokens of an extension A holds. A catches up from the
/// last change number it saw once it is back, and a call placed on A reaches the phone registered
/// on B and pushes the token posted on B (never the ones removed meanwhile).
extension CallProcessTests {
    /// A value `/metrics` on `port` shows (the first sample of `name`).
    func metric(_ name: String, port: UInt16) throws -> Double? {
        let text = String(decoding: try TestHTTPClient(port: port).send("GET", "/metrics").body, as: UTF8.self)
        let line = text.split(separator: "\n").first { $0.hasPrefix(name + " ") }
        return line.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    /// The highest change number in the replica change log.
    func newestChange() throws -> Double {
        Double(try database.connect().query("SELECT coalesce(max(seq), 0)::text AS n FROM replica_changes").value(0, "n") ?? "") ?? -1
    }

    /// Waits until the instance on HTTP `port` has applied every change in the log.
    func waitUntilCaughtUp(port: UInt16, _ what: String) throws {
        let deadline = Date().addingTimeInterval(30)
        var seen: Double? = nil
        repeat {
            seen = try metric("rouse_replica_change_seq", port: port)
            if seen == (try newestChange()) { return }
            Thread.sleep(forTimeInterval: 0.05)
        } while Date() < deadline
        XCTFail("\(what): the instance applied changes up to \(String(describing: seen)), the log holds \(try newestChange())")
    }

    /// Posts (or with `DELETE`, removes) an iPhone VoIP token for 1002 through the HTTP API on `port`.
    func postToken(_ token: String, method: String = "POST", port: UInt16) throws -> Int {
        let body = method == "POST" ? #"{"token": "\#(token)", "sipUser": "1002@example.com", "platform": "ios"}"# : #"{"token": "\#(token)"}"#
        return try TestHTTPClient(port: port).send(
            method, "/api/v1/push/register", headers: [("Authorization", TestHTTPClient.basic("1002@example.com", "pw-1002"))],
            body: Data(body.utf8)
        ).status
    }

    func testAnInstanceCutFromPostgreSQLCatchesUpAndItsCallsReachWhatChangedOnTheOther() throws {
        // A names its connections, so the test can end them and no other's.
        try startRouse(wakeWait: 8, withDeskPhone: 1, extra: ["ROUSE_DATABASE_URL": database.conninfo + " application_name=rouse-a"])
        let httpA = try httpPort()
        let (b, pointsB) = try startInstance(wakeWait: 8)
        let httpB = try httpPort(of: b)
        let tcpB = try XCTUnwrap(pointsB.first { $0.transport == .tcp }).port
        // Over TCP: A reaches a phone whose connection B holds through B (RFC 5626 flows).
        func deskPhoneOnB(_ name: String) throws -> TestUserAgent {
            let agent = try TestUserAgent(
                transport: .tcp, serverPort: tcpB, user: "1002", domain: "example.com", password: "pw-1002", userAgent: name)
            agents.append(agent)
            return agent
        }

        // Before the cut, A learns of a desk phone and a token of 1002 that B holds.
        let oldToken = String(repeating: "1e", count: 32)
        let newToken = String(repeating: "2f", count: 32)
        let oldDesk = try deskPhoneOnB("RouseDeskPhone/1 (old)")
        XCTAssertEqual(try oldDesk.register().statusCode, 200)
        XCTAssertEqual(try postToken(oldToken, port: httpB), 200)
        try waitUntilCaughtUp(port: httpA, "before the cut")
        XCTAssertEqual(try metric("rouse_bindings", port: httpA), 1)
        let catchUpsBefore = try XCTUnwrap(try metric("rouse_replica_catchups_total", port: httpA))

        // The cut: every connection A opens is ended at once, while B changes 1002's phones and
        // tokens, so the NOTIFYs of those changes find no listener of A.
        let cutter = ConnectionCutter(conninfo: database.conninfo, applicationName: "rouse-a")
        cutter.start()
        try cutter.waitForKills(1)
        XCTAssertEqual(try oldDesk.register(expires: 0).statusCode, 200)
        oldDesk.close()
        let newDesk = try deskPhoneOnB("RouseDeskPhone/1 (new)")
        XCTAssertEqual(try newDesk.register().statusCode, 200)
        XCTAssertEqual(try postToken(oldToken, method: "DELETE", port: httpB), 200)
        XCTAssertEqual(try postToken(newToken, port: httpB), 200)
        try cutter.waitForKills(cutter.kills + 2)
        cutter.stop()

        // A converges: it catches up from the last number it saw.
        try waitUntilCaughtUp(port: httpA, "after the cut")
        XCTAssertGreaterThan(try XCTUnwrap(try metric("rouse_replica_catchups_total", port: httpA)), catchUpsBefore)
        XCTAssertEqual(try metric("rouse_bindings", port: httpA), 1)

        // A call placed on A pushes the token posted on B and rings the phone registered on B.
        let caller = try caller()
        TestUserAgent.link(newDesk, caller)
        let call = try place(caller)
        _ = try pushes(apns, token: newToken)
        let invite = try newDesk.waitForRequest(.invite)
        XCTAssertEqual(invite.callID, call.callID)
        try answerAndHangUp(newDesk, invite, call, caller)
        let journey = try journey(callID: call.callID, outcome: .answered)
        XCTAssertEqual(journey.pushes.map(\.device), ["iPhone (posted token)"])
        XCTAssertEqual(try apns.requests().filter { $0.path.hasSuffix(oldToken) }.count, 0, "the removed token is not pushed")
    }
}

/// Ends every PostgreSQL session of one `application_name`, over and over, until stopped: an
/// instance cut from its database (each reconnect is ended at once). Its own thread.
final class ConnectionCutter: @unchecked Sendable {
    // @unchecked: `running` and `killed` are only touched under `lock`; the thread owns its connection.
    private let conninfo: String
    private let applicationName: String
    private let lock = NSLock()
    private var running = false
    private var killed = 0
    private let finished = DispatchSemaphore(value: 0)

    init(conninfo: String, applicationName: String) {
        self.conninfo = conninfo
        self.applicationName = applicationName
    }

    var kills: Int { lock.withLock { killed } }

    func start() {
        lock.withLock { running = true }
        let thread = Thread { [self] in
            defer { finished.signal() }
            guard let connection = try? PostgresConnection(conninfo: conninfo) else { return }
            while lock.withLock({ running }) {
                let rows = try? connection.query(
                    """
                    SELECT count(pg_terminate_backend(pid))::text AS n FROM pg_stat_activity
                    WHERE application_name = $1 AND pid <> pg_backend_pid()
                    """,
                    [applicationName])
                let count = Int(rows?.value(0, "n") ?? "0") ?? 0
                lock.withLock { killed += count }
                Thread.sleep(forTimeInterval: 0.01)
            }
        }
        thread.start()
    }

    /// Waits until `count` sessions were ended in all.
    func waitForKills(_ count: Int, timeout: TimeInterval = 30) throws {
        let deadline = Date().addingTimeInterval(timeout)
        while kills < count {
            guard Date() < deadline else { throw CutterTimedOut(kills: kills, wanted: count) }
            Thread.sleep(forTimeInterval: 0.01)
        }
    }

    struct CutterTimedOut: Error { let kills: Int; let wanted: Int }

    func stop() {
        lock.withLock { running = false }
        finished.wait()
    }
}
