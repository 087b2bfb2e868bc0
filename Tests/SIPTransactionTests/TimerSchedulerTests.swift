import Dispatch
import SIPTransaction
import Synchronization
import XCTest

final class TimerSchedulerTests: XCTestCase {
    func testManualSchedulerFiresDueTimersInDeadlineOrder() {
        let scheduler = ManualTimerScheduler()
        let fired = Mutex<[String]>([])
        _ = scheduler.schedule(after: .seconds(2)) { fired.withLock { $0.append("b") } }
        _ = scheduler.schedule(after: .seconds(1)) { fired.withLock { $0.append("a") } }
        _ = scheduler.schedule(after: .seconds(2)) { fired.withLock { $0.append("c") } }
        let cancelled = scheduler.schedule(after: .milliseconds(1500)) { fired.withLock { $0.append("x") } }
        cancelled.cancel()
        XCTAssertEqual(scheduler.pendingDelays, [.seconds(1), .seconds(2), .seconds(2)])

        scheduler.advance(by: .milliseconds(999))
        XCTAssertEqual(fired.withLock { $0 }, [])
        scheduler.advance(by: .milliseconds(1))
        XCTAssertEqual(fired.withLock { $0 }, ["a"])
        scheduler.advance(by: .seconds(5))
        XCTAssertEqual(fired.withLock { $0 }, ["a", "b", "c"], "ties fire in scheduling order")
        XCTAssertEqual(scheduler.now, .seconds(6))
        XCTAssertEqual(scheduler.pendingCount, 0)
    }

    func testManualSchedulerRunsTimersScheduledByBodiesWithinTheSameAdvance() {
        let scheduler = ManualTimerScheduler()
        let times = Mutex<[Duration]>([])
        @Sendable func tick() {
            times.withLock { $0.append(scheduler.now) }
            if scheduler.now < .seconds(3) { _ = scheduler.schedule(after: .seconds(1), tick) }
        }
        _ = scheduler.schedule(after: .seconds(1), tick)
        scheduler.advance(by: .seconds(10))
        XCTAssertEqual(times.withLock { $0 }, [.seconds(1), .seconds(2), .seconds(3)])
    }

    func testDispatchSchedulerRunsOnItsQueueAndHonoursCancel() {
        let queue = DispatchQueue(label: "rouse.test.timers")
        let scheduler = DispatchTimerScheduler(queue: queue)
        let cancelledRan = Mutex(false)
        let ran = expectation(description: "timer fired")
        // The queue is held shut while the first timer is scheduled and cancelled, so however slow
        // this thread is (ThreadSanitizer), that timer cannot run before `cancel()` is called.
        let gate = DispatchSemaphore(value: 0)
        let queueHeld = DispatchSemaphore(value: 0)
        queue.async {
            queueHeld.signal()
            gate.wait()
        }
        queueHeld.wait()
        let cancelled = scheduler.schedule(after: .milliseconds(1)) { cancelledRan.withLock { $0 = true } }
        _ = scheduler.schedule(after: .milliseconds(5)) {
            dispatchPrecondition(condition: .onQueue(queue))
            ran.fulfill()
        }
        cancelled.cancel()
        gate.signal()
        wait(for: [ran], timeout: 10)
        XCTAssertFalse(cancelledRan.withLock { $0 })
    }
}
