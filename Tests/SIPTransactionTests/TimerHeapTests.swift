import Dispatch
import SIPTransaction
import Synchronization
import XCTest

final class TimerHeapTests: XCTestCase {
    func testTakesWhatIsDueSoonestFirstTiesInSchedulingOrder() {
        var heap = TimerHeap<String>()
        _ = heap.schedule("c", at: .seconds(3))
        _ = heap.schedule("a", at: .seconds(1))
        _ = heap.schedule("b1", at: .seconds(2))
        _ = heap.schedule("b2", at: .seconds(2))
        XCTAssertEqual(heap.count, 4)
        XCTAssertEqual(heap.nextDeadline(), .seconds(1))

        XCTAssertEqual(heap.takeDue(at: .milliseconds(999)), [])
        XCTAssertEqual(heap.takeDue(at: .seconds(2)), ["a", "b1", "b2"])
        XCTAssertEqual(heap.nextDeadline(), .seconds(3))
        XCTAssertEqual(heap.takeDue(at: .seconds(60)), ["c"])
        XCTAssertEqual(heap.count, 0)
        XCTAssertNil(heap.nextDeadline())
    }

    func testCancelledTimersAreNeverTakenNorCountedAsNext() {
        var heap = TimerHeap<Int>()
        let first = heap.schedule(1, at: .seconds(1))
        _ = heap.schedule(2, at: .seconds(2))
        let third = heap.schedule(3, at: .seconds(3))
        XCTAssertTrue(heap.cancel(first))
        XCTAssertFalse(heap.cancel(first), "a second cancel finds nothing")
        XCTAssertEqual(heap.count, 2)
        XCTAssertEqual(heap.nextDeadline(), .seconds(2), "the cancelled top is skipped")
        XCTAssertTrue(heap.cancel(third))
        XCTAssertEqual(heap.takeDue(at: .seconds(10)), [2])
        XCTAssertFalse(heap.cancel(third))
        XCTAssertNil(heap.nextDeadline())
    }

    func testManyInterleavedTimersComeOutInDeadlineOrder() {
        var heap = TimerHeap<Int>()
        var expected: [(Int, Int)] = []
        var cancelled = Set<Int>()
        var ids: [Int: UInt64] = [:]
        for n in 0..<2_000 {
            // Deadlines and victims scattered by multiplying with primes: the same on every run.
            let deadline = n * 7_919 % 500
            ids[n] = heap.schedule(n, at: .milliseconds(deadline))
            expected.append((deadline, n))
            let victim = n * 104_729 % (n + 1)
            if n % 5 == 0, let id = ids[victim], heap.cancel(id) { cancelled.insert(victim) }
        }
        var taken: [Int] = []
        var now = 0
        while heap.count > 0 {
            now += 7
            taken += heap.takeDue(at: .milliseconds(now))
        }
        let order = expected.filter { !cancelled.contains($0.1) }.sorted { ($0.0, $0.1) < ($1.0, $1.1) }.map(\.1)
        XCTAssertEqual(taken.count, 2_000 - cancelled.count)
        XCTAssertEqual(taken, order)
    }

    func testAFreedSlotIsReusedAndTheOldIdCancelsNothingThere() {
        var heap = TimerHeap<String>()
        let first = heap.schedule("first", at: .seconds(5))
        XCTAssertTrue(heap.cancel(first))
        let second = heap.schedule("second", at: .seconds(1))
        XCTAssertNotEqual(first, second, "the reused slot has a new generation")
        XCTAssertFalse(heap.cancel(first), "the cancelled id does not reach the timer now in its slot")
        XCTAssertEqual(heap.count, 1)
        XCTAssertEqual(heap.nextDeadline(), .seconds(1))
        XCTAssertEqual(heap.takeDue(at: .seconds(10)), ["second"], "the cancelled entry left in the heap is dropped")
        let third = heap.schedule("third", at: .seconds(2))
        XCTAssertFalse(heap.cancel(second), "a taken timer's id cancels nothing")
        XCTAssertEqual(heap.takeDue(at: .seconds(10)), ["third"])
        XCTAssertFalse(heap.cancel(third))
        XCTAssertEqual(heap.count, 0)
    }

    func testHeapSchedulerTellsATargetEachTimersTokenAndHonoursCancel() {
        let queue = DispatchQueue(label: "rouse.test.heap-timers")
        let scheduler = HeapTimerScheduler(queue: queue)
        let fired = Mutex<[TimerToken]>([])
        let done = expectation(description: "last token")
        let target = TimerTarget { token in
            dispatchPrecondition(condition: .onQueue(queue))
            fired.withLock { $0.append(token) }
            if token.serial == 3 { done.fulfill() }
        }
        let cancelled = scheduler.schedule(after: .milliseconds(5), token: TimerToken(place: 7, serial: 1), for: target)
        _ = scheduler.schedule(after: .milliseconds(30), token: TimerToken(place: 9, serial: 3), for: target)
        _ = scheduler.schedule(after: .milliseconds(10), token: TimerToken(place: 8, serial: 2), for: target)
        cancelled.cancel()
        wait(for: [done], timeout: 10)
        XCTAssertEqual(fired.withLock { $0 }, [TimerToken(place: 8, serial: 2), TimerToken(place: 9, serial: 3)])
        XCTAssertEqual(scheduler.pendingCount, 0)
    }

    func testHeapSchedulerRunsOnItsQueueInDeadlineOrderAndHonoursCancel() {
        let queue = DispatchQueue(label: "rouse.test.heap-timers")
        let scheduler = HeapTimerScheduler(queue: queue)
        let order = Mutex<[String]>([])
        let done = expectation(description: "last timer fired")
        let cancelled = scheduler.schedule(after: .milliseconds(5)) { order.withLock { $0.append("cancelled") } }
        _ = scheduler.schedule(after: .milliseconds(40)) {
            dispatchPrecondition(condition: .onQueue(queue))
            order.withLock { $0.append("late") }
            done.fulfill()
        }
        _ = scheduler.schedule(after: .milliseconds(20)) { order.withLock { $0.append("early") } }
        cancelled.cancel()
        XCTAssertEqual(scheduler.pendingCount, 2)
        wait(for: [done], timeout: 10)
        XCTAssertEqual(order.withLock { $0 }, ["early", "late"])
        XCTAssertEqual(scheduler.pendingCount, 0)
    }

    func testHeapSchedulerRearmsForAnEarlierTimerScheduledLater() {
        let queue = DispatchQueue(label: "rouse.test.heap-timers")
        let scheduler = HeapTimerScheduler(queue: queue)
        let order = Mutex<[String]>([])
        let early = expectation(description: "early timer fired")
        _ = scheduler.schedule(after: .seconds(3_600)) { order.withLock { $0.append("hour") } }
        _ = scheduler.schedule(after: .milliseconds(10)) {
            order.withLock { $0.append("soon") }
            early.fulfill()
        }
        wait(for: [early], timeout: 10)
        XCTAssertEqual(order.withLock { $0 }, ["soon"])
        XCTAssertEqual(scheduler.pendingCount, 1, "the hour-long timer still waits")
    }

    func testTimersScheduledByABodyRun() {
        let queue = DispatchQueue(label: "rouse.test.heap-timers")
        let scheduler = HeapTimerScheduler(queue: queue)
        let ticks = Mutex(0)
        let done = expectation(description: "third tick")
        @Sendable func tick() {
            let count = ticks.withLock { count in
                count += 1
                return count
            }
            if count < 3 { _ = scheduler.schedule(after: .milliseconds(1), tick) } else { done.fulfill() }
        }
        _ = scheduler.schedule(after: .milliseconds(1), tick)
        wait(for: [done], timeout: 10)
        XCTAssertEqual(ticks.withLock { $0 }, 3)
    }

    func testLongTimersShareTheWakeUpAtTheNextGrain() {
        let queue = DispatchQueue(label: "rouse.test.heap-timers")
        let grain: UInt64 = 500_000_000
        let scheduler = HeapTimerScheduler(queue: queue, slack: .zero, coarseAfter: .milliseconds(1), grain: .nanoseconds(Int64(grain)))
        // Two deadlines 100 ms apart, both inside the grain after next: rounded up, they are one.
        let now = DispatchTime.now().uptimeNanoseconds
        let boundary = (now / grain + 2) * grain
        let first = Int64(boundary - grain - now) + 100_000_000
        let seen = Mutex<[(at: UInt64, pending: Int)]>([])
        let done = expectation(description: "both long timers fired")
        done.expectedFulfillmentCount = 2
        for delay in [first, first + 100_000_000] {
            _ = scheduler.schedule(after: .nanoseconds(delay)) {
                seen.withLock { $0.append((DispatchTime.now().uptimeNanoseconds, scheduler.pendingCount)) }
                done.fulfill()
            }
        }
        wait(for: [done], timeout: 10)
        let fired = seen.withLock { $0 }
        XCTAssertEqual(fired.map(\.pending), [0, 0], "the second was taken in the same wake-up as the first")
        XCTAssertTrue(fired.allSatisfy { $0.at >= boundary }, "not before the grain's end")
    }
}
