import Foundation
import Glibc
import RouseTestSupport
import SIPTransport
import Storage
import XCTest

/// `sip_rate_limit` against a running `rouse serve`: a source flooding OPTIONS gets only about its
/// allowance answered (the rest is dropped unread), while another source address is answered in
/// full meanwhile.
final class RateLimitProcessTests: XCTestCase {
    var database: TestDatabase!
    var rouse: RouseProcess?

    override func setUpWithError() throws {
        database = try TestDatabase()
        try Migrator.migrate(try database.connect())
    }

    override func tearDown() {
        _ = rouse?.stop()
        database?.drop()
    }

    /// A UDP socket bound to `address` (any 127.x.y.z works on Linux loopback).
    func socket(boundTo address: String) throws -> Int32 {
        let fd = Glibc.socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw Failure("socket") }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        inet_pton(AF_INET, address, &local.sin_addr)
        let bound = withUnsafePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0 else { throw Failure("bind \(address)") }
        var timeout = timeval(tv_sec: 0, tv_usec: 200_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    func send(_ fd: Int32, port: UInt16, _ number: Int, from address: String) {
        let text = "OPTIONS sip:127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP \(address):5099;branch=z9hG4bKflood\(number)-\(UUID().uuidString)\r\n"
            + "From: <sip:flood@\(address)>;tag=f\(number)\r\nTo: <sip:127.0.0.1>\r\nCall-ID: flood-\(number)-\(address)\r\n"
            + "CSeq: 1 OPTIONS\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
        var peer = sockaddr_in()
        peer.sin_family = sa_family_t(AF_INET)
        peer.sin_port = port.bigEndian
        inet_pton(AF_INET, "127.0.0.1", &peer.sin_addr)
        let bytes = Array(text.utf8)
        _ = withUnsafePointer(to: &peer) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, bytes, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }

    /// Answers read until none came for `quiet` seconds (bounded by `limit` seconds in all).
    func answers(_ fd: Int32, quiet: TimeInterval = 1.5, limit: TimeInterval = 20) -> Int {
        var count = 0
        var buffer = [UInt8](repeating: 0, count: 65536)
        let end = Date().addingTimeInterval(limit)
        var lastAnswer = Date()
        while Date() < end, Date().timeIntervalSince(lastAnswer) < quiet {
            if recv(fd, &buffer, buffer.count, 0) > 0 {
                count += 1
                lastAnswer = Date()
            }
        }
        return count
    }

    func testAFloodingSourceIsCutToItsAllowanceAndOthersAreServed() throws {
        let process = try RouseProcess(
            arguments: ["serve"],
            environment: ["ROUSE_DATABASE_URL": database.conninfo, "ROUSE_SIP_LISTEN": "udp:127.0.0.1:0", "ROUSE_SIP_RATE_LIMIT": "20"])
        rouse = process
        XCTAssertTrue(process.waitForOutput(containing: "serving SIP on"), process.outputText)
        let line = try XCTUnwrap(process.outputText.split(separator: "\n").first { $0.contains("serving SIP on") })
        let port = try ListenPoint(parsing: line.components(separatedBy: "serving SIP on ").last ?? "").port

        let flooder = try socket(boundTo: "127.0.0.2")
        let neighbour = try socket(boundTo: "127.0.0.3")
        defer {
            close(flooder)
            close(neighbour)
        }
        let started = Date()
        for number in 0..<400 { send(flooder, port: port, number, from: "127.0.0.2") }
        let sending = Date().timeIntervalSince(started)
        for number in 0..<10 { send(neighbour, port: port, number, from: "127.0.0.3") }
        let answeredFlood = answers(flooder)
        let answeredNeighbour = answers(neighbour)
        // A burst of 40, then 20 a second while the flood lasted; never the whole flood.
        XCTAssertGreaterThanOrEqual(answeredFlood, 20)
        XCTAssertLessThanOrEqual(answeredFlood, 40 + Int((sending + 1) * 20) + 5, "sent in \(sending) s")
        XCTAssertEqual(answeredNeighbour, 10, "another source is not held back by the flood")
    }
}
