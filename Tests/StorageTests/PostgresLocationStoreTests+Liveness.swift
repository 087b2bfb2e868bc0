import CallRouting
import Foundation
import Registrar
import RouseTestSupport
import RouseVocabulary
import Storage
import XCTest

/// The stale-device rule's record on real PostgreSQL (issue 20 item 1): REGISTERs and posts are
/// signs of life, ring pushes without an answer count, and the verdict follows `DeviceStaleness`.
extension PostgresLocationStoreTests {
    var channel: PushChannel { PushChannel(provider: .apns, token: String(repeating: "4d", count: 32), param: nil, kind: .voip) }
    var policy: DeviceStaleness.Policy { DeviceStaleness.Policy() }
    var day: TimeInterval { 24 * 3600 }
    /// A manual clock's start, well in the past so that the database's own `now()` is later.
    var start: Date { Date(timeIntervalSince1970: 1_700_000_000) }

    func liveness(_ channel: PushChannel) throws -> DeviceStaleness? {
        try PushTokenLiveness.liveness(of: [channel.tokenID], on: try database.database.connect())[channel.tokenID]
    }

    /// A ring push at `at` whose call outlasted the wait, unanswered.
    func unansweredRing(at: Date) throws -> DeviceStaleness.Change {
        try PushTokenLiveness.ringPushEnded(
            channel.tokenID, pushedAt: at, accepted: true, callOutlastedWakeWait: true, now: at + 8, policy: policy,
            on: try database.database.connect())
    }

    func testARegisterIsASignOfLifeUnansweredPushesMakeTheDeviceStaleAndTheNextRegisterRevivesIt() throws {
        var binding = makeBinding(alice, expiresIn: 60 * day, channels: [channel], now: start)
        try store.applyAndWait([.save(binding)])
        XCTAssertEqual(try liveness(channel), DeviceStaleness(lastSignOfLife: start))

        XCTAssertEqual(try unansweredRing(at: start + 8 * day), .unchanged)
        XCTAssertEqual(try unansweredRing(at: start + 9 * day), .unchanged)
        XCTAssertEqual(try unansweredRing(at: start + 10 * day), .becameStale)
        XCTAssertEqual(try liveness(channel), DeviceStaleness(lastSignOfLife: start, unansweredPushes: 3))
        XCTAssertEqual(try liveness(channel)?.isStale(under: policy, now: start + 10 * day + 60), true)

        // The app registers again (a refresh of the same binding): alive.
        binding.registeredAt = start + 11 * day
        binding.cseq += 1
        try store.applyAndWait([.save(binding)])
        XCTAssertEqual(try liveness(channel), DeviceStaleness(lastSignOfLife: start + 11 * day))
    }

    func testABindingRewrittenWithoutANewRegisterIsNoSignOfLife() throws {
        // Alice's binding holds two tokens; the second moves to bob's phone, and the registrar
        // rewrites her binding without it: her phone said nothing, so its count stays.
        let other = PushChannel(provider: .fcm, token: "moves-away", param: nil, kind: .standard)
        var binding = makeBinding(alice, expiresIn: 60 * day, channels: [channel, other], now: start)
        try store.applyAndWait([.save(binding)])
        XCTAssertEqual(try unansweredRing(at: start + day), .unchanged)
        binding.pushChannels = [channel]
        try store.applyAndWait([.save(binding), .save(makeBinding(bob, expiresIn: 60 * day, channels: [other], now: start + 2 * day))])
        XCTAssertEqual(try liveness(channel)?.unansweredPushes, 1)
        XCTAssertEqual(try liveness(other), DeviceStaleness(lastSignOfLife: start + 2 * day))
    }

    func testAPostIsASignOfLifeAndAnUnknownDeviceStartsItsWeekAtItsFirstPush() throws {
        let connection = try database.database.connect()
        // No record at all (a device from before migration 710): its pushes count from now on.
        XCTAssertNil(try liveness(channel))
        XCTAssertEqual(try unansweredRing(at: start), .unchanged)
        XCTAssertEqual(try unansweredRing(at: start + 1), .unchanged)
        XCTAssertEqual(try unansweredRing(at: start + 2), .unchanged, "three pushes, but not a week of silence yet")
        XCTAssertEqual(try liveness(channel)?.unansweredPushes, 3)
        XCTAssertEqual(try liveness(channel)?.isStale(under: policy, now: start + 7 * day), true)

        _ = try PostedPushTokens.store(channel, deviceID: nil, for: alice, on: connection)
        let after = try XCTUnwrap(try liveness(channel))
        XCTAssertEqual(after.unansweredPushes, 0, "the post answered for the device")
        XCTAssertGreaterThan(after.lastSignOfLife, start)
    }

    func testRefusedPushesAndShortCallsAreRecordedWithoutCounting() throws {
        try store.applyAndWait([.save(makeBinding(alice, expiresIn: 60 * day, channels: [channel], now: start))])
        let connection = try database.database.connect()
        for index in 0..<4 {
            let at = start + Double(8 + index) * day
            XCTAssertEqual(
                try PushTokenLiveness.ringPushEnded(
                    channel.tokenID, pushedAt: at, accepted: false, callOutlastedWakeWait: true, now: at + 8, policy: policy, on: connection),
                .unchanged)
            XCTAssertEqual(
                try PushTokenLiveness.ringPushEnded(
                    channel.tokenID, pushedAt: at, accepted: true, callOutlastedWakeWait: false, now: at + 2, policy: policy, on: connection),
                .unchanged)
        }
        XCTAssertEqual(try liveness(channel), DeviceStaleness(lastSignOfLife: start))
    }
}
