import Dispatch
import SIPMessage
import SIPTransaction
import Synchronization
import XCTest

final class TransactionLayerTests: XCTestCase {
    let phone = 7

    func testRetransmittedInviteIsAbsorbedAndLastResponseResent() throws {
        let harness = LayerHarness()
        let layer = harness.layer
        let invite = TestMessages.invite()
        layer.receive(.request(invite), from: phone, isReliable: false)
        XCTAssertEqual(harness.sentStatusCodes, [100])
        let handle = try XCTUnwrap(harness.requestHandles.first)
        XCTAssertEqual(harness.events.all, [.request(invite, handle, flow: phone)])

        XCTAssertTrue(layer.respond(TestMessages.response(180, to: invite), to: handle))
        layer.receive(.request(invite), from: phone, isReliable: false)
        XCTAssertEqual(harness.sentStatusCodes, [100, 180, 180])

        XCTAssertTrue(layer.respond(TestMessages.response(486, to: invite), to: handle))
        layer.receive(.request(invite), from: phone, isReliable: false)
        XCTAssertEqual(harness.sentStatusCodes, [100, 180, 180, 486, 486])
        XCTAssertEqual(harness.events.count, 1, "retransmissions never reach the core")
        XCTAssertEqual(harness.sent.all.map(\.flow), Array(repeating: phone, count: 5))

        harness.scheduler.advance(by: .milliseconds(1500))
        XCTAssertEqual(harness.sentStatusCodes.count, 7, "timer G at 500 ms and 1.5 s")

        layer.receive(.request(TestMessages.ack(for: invite, toTag: "to-1")), from: phone, isReliable: false)
        XCTAssertEqual(harness.events.count, 1, "the ACK for a non-2xx is absorbed")
        XCTAssertEqual(layer.activeTransactionCount, 1)
        harness.scheduler.advance(by: .seconds(5))
        XCTAssertEqual(harness.sentStatusCodes.count, 7, "no more retransmission after the ACK")
        XCTAssertEqual(layer.activeTransactionCount, 0, "timer I ended the transaction")
        XCTAssertEqual(harness.scheduler.pendingCount, 0, "no timer left behind")
        XCTAssertFalse(layer.respond(TestMessages.response(500, to: invite), to: handle))
    }

    func testTimerGBacksOffToT2AndTimerHReportsTimeout() throws {
        let harness = LayerHarness()
        let invite = TestMessages.invite()
        harness.layer.receive(.request(invite), from: phone, isReliable: false)
        let handle = try XCTUnwrap(harness.requestHandles.first)
        harness.layer.respond(TestMessages.response(603, to: invite), to: handle)
        harness.scheduler.advance(by: .seconds(40))
        let finals = harness.sent.all.filter {
            if case .response(let response) = $0.message { return response.statusCode == 603 }
            return false
        }
        let times: [Duration] = [0, 500, 1500, 3500, 7500, 11500, 15500, 19500, 23500, 27500, 31500]
            .map { .milliseconds($0) }
        XCTAssertEqual(finals.map(\.at), times)
        XCTAssertEqual(harness.events.all.last, .serverTransactionFailed(handle, .timedOut))
        XCTAssertEqual(harness.layer.activeTransactionCount, 0)
        XCTAssertEqual(harness.scheduler.pendingCount, 0)
    }

    func testAcceptedInviteAbsorbsRetransmissionsAndPassesACKToCore() throws {
        let harness = LayerHarness()
        let invite = TestMessages.invite()
        harness.layer.receive(.request(invite), from: phone, isReliable: false)
        let handle = try XCTUnwrap(harness.requestHandles.first)
        let ok = TestMessages.response(200, to: invite)
        harness.layer.respond(ok, to: handle)
        harness.layer.receive(.request(invite), from: phone, isReliable: false)
        XCTAssertEqual(harness.sentStatusCodes, [100, 200], "RFC 6026: INVITE retransmission absorbed")
        XCTAssertTrue(harness.layer.respond(ok, to: handle), "the core's 2xx retransmission passes")

        let ack = TestMessages.ack(for: invite, toTag: "to-1", branch: "z9hG4bK-ack-1")
        harness.layer.receive(.request(ack), from: phone, isReliable: false)
        XCTAssertEqual(harness.events.all.last, .ack(ack, flow: phone))
        harness.scheduler.advance(by: .seconds(32))
        XCTAssertEqual(harness.layer.activeTransactionCount, 0, "timer L ended the transaction")
    }

    func testNonInviteRetransmissionGetsFinalResponseAgainUntilTimerJ() throws {
        let harness = LayerHarness()
        let register = TestMessages.request(.register)
        harness.layer.receive(.request(register), from: phone, isReliable: false)
        harness.layer.receive(.request(register), from: phone, isReliable: false)
        XCTAssertEqual(harness.sent.count, 0, "discarded in Trying")
        let handle = try XCTUnwrap(harness.requestHandles.first)
        harness.layer.respond(TestMessages.response(200, to: register), to: handle)
        harness.layer.receive(.request(register), from: phone, isReliable: false)
        XCTAssertEqual(harness.sentStatusCodes, [200, 200])
        XCTAssertEqual(harness.events.count, 1)
        harness.scheduler.advance(by: .milliseconds(31_999))
        XCTAssertEqual(harness.layer.activeTransactionCount, 1)
        harness.scheduler.advance(by: .milliseconds(1))
        XCTAssertEqual(harness.layer.activeTransactionCount, 0)
    }

    func testReliableNonInviteEndsWithItsFinalResponse() throws {
        let harness = LayerHarness()
        let options = TestMessages.request(.options, transport: "TCP")
        harness.layer.receive(.request(options), from: phone, isReliable: true)
        harness.layer.respond(TestMessages.response(200, to: options), to: try XCTUnwrap(harness.requestHandles.first))
        XCTAssertEqual(harness.layer.activeTransactionCount, 0)
        XCTAssertEqual(harness.scheduler.pendingCount, 0)
    }

    func testCancelFindsItsInviteAndEverythingEnds() throws {
        let harness = LayerHarness()
        let layer = harness.layer
        let invite = TestMessages.invite()
        layer.receive(.request(invite), from: phone, isReliable: false)
        let cancel = TestMessages.cancel(for: invite)
        layer.receive(.request(cancel), from: phone, isReliable: false)
        let handles = harness.requestHandles
        XCTAssertEqual(handles.count, 2, "the CANCEL has its own transaction and reaches the core")
        XCTAssertEqual(harness.events.all.last, .request(cancel, handles[1], flow: phone))

        let inviteHandle = try XCTUnwrap(layer.inviteTransaction(cancelledBy: cancel))
        XCTAssertEqual(inviteHandle, handles[0])
        XCTAssertTrue(layer.isAwaitingFinalResponse(inviteHandle))
        layer.respond(TestMessages.response(200, to: cancel), to: handles[1])
        layer.respond(TestMessages.response(487, to: invite), to: inviteHandle)
        XCTAssertFalse(layer.isAwaitingFinalResponse(inviteHandle))
        XCTAssertEqual(harness.sentStatusCodes, [100, 200, 487])
        layer.receive(.request(TestMessages.ack(for: invite, toTag: "to-1")), from: phone, isReliable: false)
        XCTAssertEqual(harness.events.count, 2)

        harness.scheduler.advance(by: .seconds(64))
        XCTAssertEqual(layer.activeTransactionCount, 0)
        XCTAssertEqual(harness.scheduler.pendingCount, 0)
        XCTAssertNil(layer.inviteTransaction(cancelledBy: cancel), "nothing left to cancel: the core answers 481")
    }

    func testACKMatchingNoTransactionGoesToCore() {
        let harness = LayerHarness()
        let ack = TestMessages.request(.ack, branch: "z9hG4bK-lone-ack", toTag: "to-1")
        harness.layer.receive(.request(ack), from: phone, isReliable: false)
        XCTAssertEqual(harness.events.all, [.ack(ack, flow: phone)])
        XCTAssertEqual(harness.layer.activeTransactionCount, 0)
    }

    func testRFC2543InviteRetransmissionAndACKMatchWithoutCookie() throws {
        let harness = LayerHarness()
        let invite = TestMessages.request(.invite, branch: "old-2543-branch")
        harness.layer.receive(.request(invite), from: phone, isReliable: false)
        harness.layer.receive(.request(invite), from: phone, isReliable: false)
        XCTAssertEqual(harness.events.count, 1)
        let handle = try XCTUnwrap(harness.requestHandles.first)
        XCTAssertTrue(handle.key.isRFC2543)
        harness.layer.respond(TestMessages.response(486, to: invite, toTag: "busy"), to: handle)

        let strangerACK = TestMessages.ack(for: invite, toTag: "somebody-else")
        harness.layer.receive(.request(strangerACK), from: phone, isReliable: false)
        XCTAssertEqual(harness.events.all.last, .ack(strangerACK, flow: phone), "To tag differs: not ours")

        harness.layer.receive(.request(TestMessages.ack(for: invite, toTag: "busy")), from: phone, isReliable: false)
        XCTAssertEqual(harness.events.count, 2, "the matching ACK is absorbed")
        harness.scheduler.advance(by: .seconds(5))
        XCTAssertEqual(harness.layer.activeTransactionCount, 0)
    }

    func testNonInviteClientRetransmitsWithTimerEAndTimesOutWith408() throws {
        let harness = LayerHarness()
        let results = Log<ClientTransactionEvent>()
        let options = TestMessages.request(.options, branch: "z9hG4bK-out-1")
        try harness.layer.sendRequest(options, over: 3, isReliable: false) { results.append($0) }
        harness.scheduler.advance(by: .seconds(40))
        let times: [Duration] = [0, 500, 1500, 3500, 7500, 11500, 15500, 19500, 23500, 27500, 31500]
            .map { .milliseconds($0) }
        XCTAssertEqual(harness.sentRequests.map(\.at), times)
        XCTAssertEqual(harness.sentRequests.map(\.flow), Array(repeating: 3, count: times.count))
        XCTAssertEqual(results.all, [.timedOut(SIPResponse(replyingTo: options, statusCode: 408))])
        XCTAssertEqual(results.all.first?.response.statusCode, 408)
        XCTAssertEqual(harness.layer.activeTransactionCount, 0)
        XCTAssertEqual(harness.scheduler.pendingCount, 0)
    }

    func testClientOverTCPDoesNotRetransmitAndEndsAtFinalResponse() throws {
        let harness = LayerHarness()
        let results = Log<ClientTransactionEvent>()
        let register = TestMessages.request(.register, branch: "z9hG4bK-out-2", transport: "TCP")
        try harness.layer.sendRequest(register, over: 4, isReliable: true) { results.append($0) }
        harness.scheduler.advance(by: .seconds(20))
        XCTAssertEqual(harness.sentRequests.count, 1)
        let ok = TestMessages.response(200, to: register)
        harness.layer.receive(.response(ok), from: 4, isReliable: true)
        XCTAssertEqual(results.all, [.response(ok)])
        XCTAssertEqual(harness.layer.activeTransactionCount, 0)
        XCTAssertEqual(harness.scheduler.pendingCount, 0)

        harness.layer.receive(.response(ok), from: 4, isReliable: true)
        XCTAssertEqual(harness.events.all, [.strayResponse(ok, flow: 4)], "a late retransmission is stray")
        XCTAssertEqual(results.count, 1)
    }

    func testInviteClientAcknowledgesNon2xxAndAbsorbsItsRetransmission() throws {
        let harness = LayerHarness()
        let results = Log<ClientTransactionEvent>()
        let invite = TestMessages.request(.invite, branch: "z9hG4bK-out-3")
        try harness.layer.sendRequest(invite, over: 5, isReliable: false) { results.append($0) }
        let ringing = TestMessages.response(180, to: invite)
        harness.layer.receive(.response(ringing), from: 5, isReliable: false)
        harness.scheduler.advance(by: .seconds(60))
        XCTAssertEqual(harness.sentRequests.count, 1, "no retransmission nor timeout in Proceeding")

        let busy = TestMessages.response(486, to: invite)
        harness.layer.receive(.response(busy), from: 5, isReliable: false)
        harness.layer.receive(.response(busy), from: 5, isReliable: false)
        XCTAssertEqual(results.all, [.response(ringing), .response(busy)])
        let methods = harness.sentRequests.compactMap { sent -> SIPMethod? in
            if case .request(let request) = sent.message { return request.method }
            return nil
        }
        XCTAssertEqual(methods, [.invite, .ack, .ack])
        harness.scheduler.advance(by: .seconds(32))
        XCTAssertEqual(harness.layer.activeTransactionCount, 0, "timer D ended the transaction")
    }

    func testSendRequestRefusesMissingBranchAndACKAndDuplicates() throws {
        let harness = LayerHarness()
        let ignore: @Sendable (ClientTransactionEvent) -> Void = { _ in }
        let noBranch = TestMessages.request(.options, branch: nil)
        XCTAssertThrowsError(try harness.layer.sendRequest(noBranch, over: 1, isReliable: false, onResponse: ignore)) {
            XCTAssertEqual($0 as? TransactionLayerError, .missingBranch)
        }
        let ack = TestMessages.request(.ack, branch: "z9hG4bK-a")
        XCTAssertThrowsError(try harness.layer.sendRequest(ack, over: 1, isReliable: false, onResponse: ignore)) {
            XCTAssertEqual($0 as? TransactionLayerError, .ackIsNotATransaction)
        }
        let options = TestMessages.request(.options, branch: "z9hG4bK-dup")
        try harness.layer.sendRequest(options, over: 1, isReliable: false, onResponse: ignore)
        XCTAssertThrowsError(try harness.layer.sendRequest(options, over: 1, isReliable: false, onResponse: ignore)) {
            XCTAssertEqual($0 as? TransactionLayerError, .duplicateTransaction)
        }
        XCTAssertEqual(harness.layer.activeTransactionCount, 1)
        XCTAssertEqual(harness.sentRequests.count, 1)
    }

    func testTransportFailureEndsTransactionsOnThatFlowOnly() throws {
        let harness = LayerHarness()
        let results = Log<ClientTransactionEvent>()
        let invite = TestMessages.invite(transport: "TCP")
        harness.layer.receive(.request(invite), from: 1, isReliable: true)
        let other = TestMessages.request(.register, branch: "z9hG4bK-other", transport: "TCP")
        harness.layer.receive(.request(other), from: 2, isReliable: true)
        let bye = TestMessages.request(.bye, branch: "z9hG4bK-out-4", transport: "TCP")
        try harness.layer.sendRequest(bye, over: 1, isReliable: true) { results.append($0) }
        XCTAssertEqual(harness.layer.activeTransactionCount, 3)

        harness.layer.transportFailed(on: 1)
        XCTAssertEqual(harness.layer.activeTransactionCount, 1)
        let handle = try XCTUnwrap(harness.requestHandles.first)
        XCTAssertTrue(harness.events.all.contains(.serverTransactionFailed(handle, .transportError)))
        XCTAssertEqual(results.all, [.transportError(SIPResponse(replyingTo: bye, statusCode: 503))])
    }

    /// A connection closing must not make the loop thread visit every transaction the layer holds
    /// (issue 17: with tens of thousands of answered calls' transactions waiting out their timers,
    /// that scan held the next INVITE ~40 ms). Counted, not timed: how many times the layer
    /// compares flows while failing one flow among thousands.
    func testTransportFailureVisitsOnlyThatFlowsTransactions() throws {
        let comparisons = ComparisonCounter()
        let scheduler = ManualTimerScheduler()
        let failures = Log<TransactionLayerEvent<CountedFlow>>()
        let layer = TransactionLayer<CountedFlow>(
            timers: TransactionTimers(), scheduler: scheduler, send: { _, _ in }, core: { failures.append($0) })
        let others = 3_000
        for index in 0..<others {
            let request = TestMessages.request(.options, branch: "z9hG4bK-idle-\(index)", transport: "TCP")
            layer.receive(.request(request), from: CountedFlow(id: index, counter: comparisons), isReliable: true)
        }
        let closing = CountedFlow(id: -1, counter: comparisons)
        layer.receive(.request(TestMessages.invite(transport: "TCP")), from: closing, isReliable: true)
        let results = Log<ClientTransactionEvent>()
        let bye = TestMessages.request(.bye, branch: "z9hG4bK-out-closing", transport: "TCP")
        try layer.sendRequest(bye, over: closing, isReliable: true) { results.append($0) }
        XCTAssertEqual(layer.activeTransactionCount, others + 2)
        XCTAssertEqual(layer.flowsWithTransactions, others + 1)

        comparisons.reset()
        layer.transportFailed(on: closing)
        // A lookup in the flow index compares a few flows (a few hundred when the run's hash seed
        // makes a long probe chain in the dictionaries); a scan compares every one of the 3,000.
        XCTAssertLessThan(comparisons.count, others / 4, "failing one flow compared \(comparisons.count) flows")
        XCTAssertEqual(results.all, [.transportError(SIPResponse(replyingTo: bye, statusCode: 503))])
        XCTAssertTrue(failures.all.contains {
            if case .serverTransactionFailed(_, .transportError) = $0 { return true }
            return false
        })
        XCTAssertEqual(layer.activeTransactionCount, others)
        XCTAssertEqual(layer.flowsWithTransactions, others)
    }

    func testCoreMayRespondFromInsideItsCallback() {
        let harness = LayerHarness { event, layer in
            if case .request(let request, let handle, _) = event {
                layer.respond(TestMessages.response(200, to: request), to: handle)
            }
        }
        let options = TestMessages.request(.options)
        harness.layer.receive(.request(options), from: phone, isReliable: false)
        XCTAssertEqual(harness.sentStatusCodes, [200])
        harness.scheduler.advance(by: .seconds(32))
        XCTAssertEqual(harness.layer.activeTransactionCount, 0)
    }

    func testConcurrentRequestsAndResponsesLeaveNothingBehind() {
        let count = 200
        let answered = expectation(description: "all answered")
        answered.expectedFulfillmentCount = count
        let harness = LayerHarness { event, layer in
            if case .request(let request, let handle, _) = event {
                DispatchQueue.global().async {
                    layer.respond(TestMessages.response(200, to: request), to: handle)
                    answered.fulfill()
                }
            }
        }
        DispatchQueue.concurrentPerform(iterations: count) { index in
            let request = TestMessages.request(.options, branch: "z9hG4bK-c\(index)", transport: "TCP")
            harness.layer.receive(.request(request), from: index, isReliable: true)
        }
        wait(for: [answered], timeout: 30)
        XCTAssertEqual(harness.sentStatusCodes.count, count)
        XCTAssertEqual(harness.events.count, count)
        XCTAssertEqual(harness.layer.activeTransactionCount, 0)
        XCTAssertEqual(harness.layer.flowsWithTransactions, 0)
    }
}

/// The layer has no lock over all its transactions: they are spread over shards by key, each
/// locked on its own (issue 21: several SIP loops at once).
final class TransactionLayerShardTests: XCTestCase {
    /// While one shard's lock is held (its scheduler call is stuck inside the layer), a request
    /// whose key falls in another shard is still matched, answered and sent. With one lock over
    /// the whole layer the second request would wait for the first and this would time out.
    func testARequestInAnotherShardIsServedWhileOneShardIsBusy() throws {
        let scheduler = BlockingScheduler()
        let sent = Log<Int>()
        let handles = Log<ServerTransactionHandle>()
        let layer = TransactionLayer<Int>(
            timers: TransactionTimers(), scheduler: scheduler, shardCount: 8,
            send: { bytes, _ in
                if case .response(let response) = try? SIPParser.parse(bytes) { sent.append(response.statusCode) }
            },
            core: { event in
                if case .request(_, let handle, _) = event { handles.append(handle) }
            })
        let first = TestMessages.request(.options, branch: "z9hG4bK-busy-0")
        let firstShard = layer.shardIndex(of: try XCTUnwrap(TransactionKey.server(for: first)))
        let second = try XCTUnwrap(
            (1..<200).lazy.map { TestMessages.request(.invite, branch: "z9hG4bK-free-\($0)") }
                .first { layer.shardIndex(of: TransactionKey.server(for: $0)!) != firstShard })
        layer.receive(.request(first), from: 1, isReliable: false)
        let firstHandle = try XCTUnwrap(handles.all.first)

        // The OPTIONS' 200 over UDP starts timer J inside its shard's lock; the scheduler holds it there.
        scheduler.blockNext()
        let firstDone = expectation(description: "the blocked response finished")
        DispatchQueue.global().async {
            layer.respond(TestMessages.response(200, to: first), to: firstHandle)
            firstDone.fulfill()
        }
        XCTAssertTrue(scheduler.waitUntilBlocked(timeout: .seconds(30)), "the 200 reached the scheduler")

        // The INVITE is in another shard: its 100 Trying goes out although the first shard is stuck.
        let secondDone = expectation(description: "the other shard's request was served")
        DispatchQueue.global().async {
            layer.receive(.request(second), from: 2, isReliable: false)
            secondDone.fulfill()
        }
        wait(for: [secondDone], timeout: 30)
        XCTAssertEqual(sent.all, [100], "the INVITE's 100 Trying, sent while the OPTIONS' shard was locked")
        XCTAssertEqual(handles.count, 2)

        scheduler.release()
        wait(for: [firstDone], timeout: 30)
        XCTAssertEqual(sent.all, [100, 200], "the 200 went out once its shard was free")
        XCTAssertEqual(layer.activeTransactionCount, 2)
    }

    /// Keys spread over the shards (a hash, not one shard for all), and one shard works as one lock.
    func testKeysSpreadOverTheShardsAndOneShardHoldsThemAll() throws {
        let harness = LayerHarness()
        XCTAssertEqual(harness.layer.shardCount, TransactionLayer<Int>.defaultShardCount)
        let keys = try (0..<1_000).map {
            try XCTUnwrap(TransactionKey.server(for: TestMessages.request(.register, branch: "z9hG4bK-spread-\($0)")))
        }
        let used = Set(keys.map { harness.layer.shardIndex(of: $0) })
        XCTAssertGreaterThan(used.count, harness.layer.shardCount / 2, "1,000 keys fell in \(used.count) shards")
        XCTAssertTrue(used.allSatisfy { (0..<harness.layer.shardCount).contains($0) })

        let single = TransactionLayer<Int>(
            timers: TransactionTimers(), scheduler: ManualTimerScheduler(), shardCount: 1, send: { _, _ in }, core: { _ in })
        XCTAssertEqual(Set(keys.map { single.shardIndex(of: $0) }), [0])
        for index in 0..<50 {
            single.receive(.request(TestMessages.request(.options, branch: "z9hG4bK-one-\(index)")), from: index, isReliable: false)
        }
        XCTAssertEqual(single.activeTransactionCount, 50)
        XCTAssertEqual(single.flowsWithTransactions, 50)
    }

    /// A transaction's slot is reused once it ends: a handle of the ended one (its serial) reaches
    /// nothing there, and the new one's Timer J, named by the slot, ends it.
    func testAnEndedTransactionsHandleAndTimerDoNotReachTheOneNowInItsSlot() throws {
        let scheduler = ManualTimerScheduler()
        let sent = Log<[UInt8]>()
        let requests = Log<ServerTransactionHandle>()
        let layer = TransactionLayer<Int>(
            timers: TransactionTimers(), scheduler: scheduler, shardCount: 1, send: { bytes, _ in sent.append(bytes) },
            core: { event in if case .request(_, let handle, _) = event { requests.append(handle) } })
        let first = TestMessages.request(.options, branch: "z9hG4bK-first", transport: "TCP")
        layer.receive(.request(first), from: 1, isReliable: true)
        let old = try XCTUnwrap(requests.all.first)
        XCTAssertTrue(layer.respond(TestMessages.response(200, to: first), to: old))
        XCTAssertEqual(layer.activeTransactionCount, 0, "a reliable non-INVITE ends with its final response")

        let second = TestMessages.request(.options, branch: "z9hG4bK-second")
        layer.receive(.request(second), from: 2, isReliable: false)
        XCTAssertFalse(layer.respond(TestMessages.response(500, to: first), to: old), "the old handle reaches nothing")
        XCTAssertTrue(layer.isAwaitingFinalResponse(try XCTUnwrap(requests.all.last)))
        XCTAssertTrue(layer.respond(TestMessages.response(200, to: second), to: try XCTUnwrap(requests.all.last)))
        XCTAssertEqual(sent.count, 2)
        XCTAssertEqual(scheduler.pendingDelays, [.seconds(32)], "Timer J of the second, over UDP")

        scheduler.advance(by: .seconds(32))
        XCTAssertEqual(layer.activeTransactionCount, 0)
        XCTAssertEqual(layer.flowsWithTransactions, 0)
    }

    /// A flow whose transactions sit in many shards fails in all of them, and leaves no index entry.
    func testTransportFailureReachesTheFlowsTransactionsInEveryShard() throws {
        let failures = Log<TransactionLayerEvent<Int>>()
        let scheduler = ManualTimerScheduler()
        let layer = TransactionLayer<Int>(
            timers: TransactionTimers(), scheduler: scheduler, send: { _, _ in }, core: { failures.append($0) })
        var shards = Set<Int>()
        for index in 0..<64 {
            let invite = TestMessages.request(.invite, branch: "z9hG4bK-many-\(index)", transport: "TCP")
            shards.insert(layer.shardIndex(of: try XCTUnwrap(TransactionKey.server(for: invite))))
            layer.receive(.request(invite), from: 5, isReliable: true)
        }
        layer.receive(.request(TestMessages.invite(branch: "z9hG4bK-other-flow", transport: "TCP")), from: 6, isReliable: true)
        XCTAssertGreaterThan(shards.count, 1, "the flow's transactions are in several shards")
        XCTAssertEqual(layer.flowsWithTransactions, 2)

        layer.transportFailed(on: 5)
        let failed = failures.all.filter {
            if case .serverTransactionFailed(_, .transportError) = $0 { return true }
            return false
        }
        XCTAssertEqual(failed.count, 64)
        XCTAssertEqual(layer.activeTransactionCount, 1, "only the other flow's INVITE is left")
        XCTAssertEqual(layer.flowsWithTransactions, 1)
    }
}

/// A scheduler that can hold one `schedule` call until released, to keep the layer's lock taken
/// (the layer schedules timers while holding its shard's lock). Thread-safe: a `Mutex` and
/// semaphores; timers it schedules never fire.
final class BlockingScheduler: TimerScheduler {
    private let armed = Mutex(false)
    private let reached = DispatchSemaphore(value: 0)
    private let gate = DispatchSemaphore(value: 0)

    func blockNext() { armed.withLock { $0 = true } }

    func waitUntilBlocked(timeout: Duration) -> Bool {
        reached.wait(timeout: .now() + .seconds(Int(timeout.components.seconds))) == .success
    }

    func release() { gate.signal() }

    func schedule(after delay: Duration, _ body: @escaping @Sendable () -> Void) -> any ScheduledTimer {
        let block = armed.withLock { armed in
            defer { armed = false }
            return armed
        }
        if block {
            reached.signal()
            gate.wait()
        }
        return NeverFiring()
    }

    private struct NeverFiring: ScheduledTimer {
        func cancel() {}
    }
}

/// Counts the flow comparisons a layer makes. Thread-safe behind a `Mutex`.
final class ComparisonCounter: Sendable {
    private let storage = Mutex(0)

    func increment() { storage.withLock { $0 += 1 } }
    func reset() { storage.withLock { $0 = 0 } }
    var count: Int { storage.withLock { $0 } }
}

/// A flow named by a number that counts every `==` made on it.
struct CountedFlow: Hashable, Sendable {
    let id: Int
    let counter: ComparisonCounter

    static func == (lhs: CountedFlow, rhs: CountedFlow) -> Bool {
        lhs.counter.increment()
        return lhs.id == rhs.id
    }

    func hash(into hasher: inout Hasher) {
        hasher.combine(id)
    }
}
