import CallRouting
import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPTransport
import Storage
import XCTest

/// Calls to the outside through outbound routes (issue 19), with SIPp 3.6.1 (Debian's
/// sip-tester) as the caller and as the trunk: the number as the route translates it, the
/// extension as P-Asserted-Identity, failover past a silent first hop, the trunk's digest
/// challenge answered with the route's credentials (checked by SIPp's own `verifyauth`), the
/// class of service refusing a call and an emergency route carrying one anyway, and routes changed
/// while Rouse runs.
final class InteropTrunkTests: XCTestCase {
    var bed: InteropBed!

    override func setUpWithError() throws {
        bed = try InteropBed()
    }

    override func tearDown() {
        bed?.tearDown()
    }

    /// SIPp as a trunk on a free UDP port of 127.0.0.1 with `scenario`, logging to `<name>.log`.
    func trunk(_ name: String, scenario: String) throws -> (process: RouseProcess, port: UInt16) {
        let port = try InteropBed.freePort()
        let process = try bed.launch(
            "/usr/bin/sipp",
            [
                "-sf", InteropBed.scenario(scenario), "-m", "1", "-i", "127.0.0.1", "-p", String(port), "-t", "u1", "-nostdin",
                "-timeout", "60s", "-timeout_error", "-trace_logs", "-log_file", bed.workspace.appendingPathComponent("\(name).log").path,
                "-trace_err", "-error_file", bed.workspace.appendingPathComponent("\(name)-errors.log").path,
            ])
        return (process, port)
    }

    func addRoute(_ draft: RouteDraft) throws {
        _ = try PostgresRoutes(connection: try bed.database.connect()).add(draft)
    }

    /// Whether the newest `routes.loaded` line Rouse logged (at start, then on every change) holds
    /// `routes` routes and `classes` classes of service. A count of loads would not do: the load
    /// made when the change listener connects can come after the test's first look.
    func routesLoaded(routes: Int, classes: Int) -> Bool {
        guard let line = bed.rouse?.outputText.split(separator: "\n").last(where: { $0.contains("routes.loaded") }) else { return false }
        return line.contains("routes=\(routes) ") && line.hasSuffix("classes=\(classes)")
    }

    func testACallGoesOutPastASilentFirstHopToTheTrunkThatAnswers() throws {
        let trunk = try trunk("trunk", scenario: "trunk-answer")
        // Nobody listens on the first hop: UDP silence, left after its 1 s hop timer.
        let silent = try InteropBed.freePort()
        try addRoute(RouteDraft(
            organisation: InteropBed.domain, name: "uk", pattern: "prefix:0044", strip: 2, prepend: "+",
            hops: ["127.0.0.1:\(silent);transport=udp", "127.0.0.1:\(trunk.port);transport=udp"], hopTimeoutMilliseconds: 1000))
        try bed.startRouse(["ROUSE_OUTSIDE_CALL_CLASS": "international"])

        let caller = try bed.sipp("caller", scenario: "caller", number: "1001", transport: .udp, arguments: ["-s", "00442079460958", "-d", "200"])
        XCTAssertEqual(caller.waitForExit(timeout: 90), 0, bed.report("SIPp caller", caller, file: "caller-errors.log") + bed.report("trunk", trunk.process))
        XCTAssertEqual(trunk.process.waitForExit(timeout: 30), 0, bed.report("SIPp trunk", trunk.process, file: "trunk-errors.log"))
        XCTAssertEqual(bed.logged("trunk"), [
            "invite sip:+442079460958@127.0.0.1:\(trunk.port) asserted <sip:1001@example.com>", "ack received", "bye received",
        ], "the trunk got the translated number, the extension as the caller's identity, and the ACK and BYE through Rouse")

        let journey = try XCTUnwrap(try bed.endedCall())
        XCTAssertEqual(journey.outcome, .answered)
        XCTAssertEqual(journey.branches.map(\.target), ["127.0.0.1:\(silent);transport=udp", "127.0.0.1:\(trunk.port);transport=udp"])
        let lines = journey.events.map(\.text)
        XCTAssertTrue(lines.contains("outside call to 00442079460958@example.com by route uk, sent as +442079460958"), "\(lines)")
        XCTAssertTrue(lines.contains("127.0.0.1:\(silent);transport=udp: no response in 1 s"), "\(lines)")
        XCTAssertTrue(try bed.waitUntil { (try PostgresCalls.recent(on: try self.bed.database.connect(), limit: 5).first?.endedAt) != nil },
                      "the BYE through Rouse ends the journey")
    }

    func testTheTrunksChallengeIsAnsweredWithTheRoutesCredentials() throws {
        let trunk = try trunk("trunk", scenario: "trunk-challenge")
        try addRoute(RouteDraft(
            organisation: InteropBed.domain, name: "trunk", pattern: "prefix:0", hops: ["127.0.0.1:\(trunk.port)"], username: "rouse-trunk",
            password: "trunk-secret"))
        try bed.startRouse()
        let caller = try bed.sipp("caller", scenario: "caller", number: "1001", transport: .udp, arguments: ["-s", "02079460958", "-d", "200"])
        XCTAssertEqual(caller.waitForExit(timeout: 90), 0, bed.report("SIPp caller", caller, file: "caller-errors.log"))
        XCTAssertEqual(trunk.process.waitForExit(timeout: 30), 0, bed.report("SIPp trunk", trunk.process, file: "trunk-errors.log"))
        let logged = bed.logged("trunk")
        XCTAssertTrue(logged.first == "auth true" || logged.first == "auth 1", "SIPp checked Rouse's digest answer: \(logged)")
        XCTAssertFalse(bed.rouse?.outputText.contains("trunk-secret") ?? true, "the route's password is never logged")
    }

    func testTheClassOfServiceRefusesACallAndAnEmergencyRouteCarriesOneAnyway() throws {
        try bed.startRouse()
        let trunk = try trunk("trunk", scenario: "trunk-answer")
        try addRoute(RouteDraft(organisation: InteropBed.domain, name: "out", pattern: "prefix:0", hops: ["127.0.0.1:\(trunk.port)"]))
        try addRoute(RouteDraft(
            organisation: InteropBed.domain, name: "emergency", position: 1, pattern: "regex:112|999", hops: ["127.0.0.1:\(trunk.port)"],
            emergency: true))
        // 1001's own class, set while Rouse runs (the instance default is national).
        try PostgresCallClasses(connection: try bed.database.connect()).setClass(.internalOnly, number: "1001", organisation: InteropBed.domain)
        XCTAssertTrue(try bed.waitUntil { self.routesLoaded(routes: 2, classes: 1) }, "every change reaches the running Rouse")

        let agent = try TestUserAgent(transport: .udp, serverPort: try bed.port(.udp), user: "1001", domain: InteropBed.domain,
                                      password: InteropBed.passwords["1001"]!)
        defer { agent.close() }
        let refused = try agent.invite("sip:02079460958@example.com").waitForFinal()
        XCTAssertEqual(refused.statusCode, 403)
        XCTAssertEqual(refused.headers[.reason], "SIP;cause=403;text=\"1001@example.com may call extensions only; this call is national\"")
        let journey = try XCTUnwrap(try bed.endedCall())
        XCTAssertEqual(journey.finalStatus, 403)
        XCTAssertEqual(journey.reason, "1001@example.com may call extensions only; this call is national", "the journey says why")

        let emergency = try bed.sipp("caller", scenario: "caller", number: "1001", transport: .udp, arguments: ["-s", "112", "-d", "200"])
        XCTAssertEqual(emergency.waitForExit(timeout: 90), 0, bed.report("SIPp caller", emergency, file: "caller-errors.log"))
        XCTAssertEqual(trunk.process.waitForExit(timeout: 30), 0, bed.report("SIPp trunk", trunk.process, file: "trunk-errors.log"))
        XCTAssertEqual(bed.logged("trunk").first, "invite sip:112@127.0.0.1:\(trunk.port) asserted <sip:1001@example.com>", bed.report("rouse", emergency))
    }
}

/// A route whose hop is a name: Rouse finds the trunk by RFC 3263 (NAPTR, SRV, A) in a DNS server
/// nobody here wrote (dnsmasq), named by `dns_servers`.
final class InteropTrunkDNSTests: XCTestCase {
    func testAHopNamedByDNSIsFoundThroughNAPTRAndSRV() throws {
        let bed = try InteropBed()
        defer { bed.tearDown() }
        let trunkPort = try InteropBed.freePort()
        let dns = try TestDNSServer(records: [
            "--naptr-record=trunk.test,10,50,s,SIP+D2U,,_sip._udp.trunk.test",
            "--srv-host=_sip._udp.trunk.test,sbc.trunk.test,\(trunkPort),10,0",
            "--host-record=sbc.trunk.test,127.0.0.1",
            "--host-record=plain.test,127.0.0.13",
        ])
        defer { dns.stop() }
        let trunk = try bed.launch(
            "/usr/bin/sipp",
            [
                "-sf", InteropBed.scenario("trunk-answer"), "-m", "1", "-i", "127.0.0.1", "-p", String(trunkPort), "-t", "u1", "-nostdin",
                "-timeout", "60s", "-timeout_error", "-trace_logs", "-log_file", bed.workspace.appendingPathComponent("trunk.log").path,
            ])
        _ = try PostgresRoutes(connection: try bed.database.connect()).add(RouteDraft(
            organisation: InteropBed.domain, name: "dns", pattern: "prefix:0", hops: ["trunk.test"]))
        try bed.startRouse(["ROUSE_DNS_SERVERS": "127.0.0.1:\(dns.port)"])
        let caller = try bed.sipp("caller", scenario: "caller", number: "1001", transport: .udp, arguments: ["-s", "02079460958", "-d", "100"])
        XCTAssertEqual(caller.waitForExit(timeout: 90), 0, bed.report("SIPp caller", caller, file: "caller-errors.log"))
        XCTAssertEqual(trunk.waitForExit(timeout: 30), 0, bed.report("SIPp trunk", trunk))
        XCTAssertEqual(bed.logged("trunk").first, "invite sip:02079460958@trunk.test asserted <sip:1001@example.com>",
                       "the Request-URI names the trunk's domain; the request went to the address SRV gave")
        let journey = try XCTUnwrap(try bed.endedCall())
        XCTAssertEqual(journey.branches.map(\.target), ["127.0.0.1:\(trunkPort);transport=udp"])
    }
}
