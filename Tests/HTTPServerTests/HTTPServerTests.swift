import Foundation
import HTTPServer
import RouseTestSupport
import XCTest

/// A context with nothing but the path's parameters.
struct PlainContext: HTTPRequestContext {
    var parameters: [String: String] = [:]
}

/// The server's own limits, with short timeouts, spoken to over real TCP on 127.0.0.1.
final class HTTPServerLimitsTests: XCTestCase {
    func testASlowClientIsCutOffAndHoldsNoWorker() throws {
        let router = HTTPRouter<PlainContext>(routes: [HTTPRoute("GET", "/ping") { _, _ in .json(200, ["pong": true]) }])
        let server = try HTTPServer(
            host: "127.0.0.1", port: 0, responder: router, limits: HTTPServer.Limits(connectionTimeout: 1, threads: 1))
        defer { server.stop() }
        XCTAssertNotEqual(server.port, 0)
        XCTAssertEqual(server.listenAddress, "127.0.0.1:\(server.port)")
        let slow = try TestHTTPClient(port: server.port, timeout: 5)
        try slow.write(Data("GET /ping HTTP/1.1\r\nHost: x\r\n".utf8))
        // One polling thread: another client is served while the slow one trickles.
        let other = try TestHTTPClient(port: server.port)
        for _ in 0..<3 {
            let answer = try other.send("GET", "/ping")
            XCTAssertEqual(answer.status, 200)
            XCTAssertEqual(String(decoding: answer.body, as: UTF8.self), "{\"pong\":true}\n")
        }
        let started = Date()
        XCTAssertTrue(slow.isClosedByServer())
        XCTAssertLessThan(Date().timeIntervalSince(started), 4)
    }

    func testAnAnswerGivenLaterFromAnotherThreadIsSent() throws {
        let router = HTTPRouter<PlainContext>(routes: [
            HTTPRoute("POST", "/later") { request, _ in
                try await Task.sleep(nanoseconds: 200_000_000)
                return HTTPResponse(status: 202, headers: [("Content-Type", "text/plain")], body: request.body)
            }
        ])
        let server = try HTTPServer(host: "127.0.0.1", port: 0, responder: router)
        defer { server.stop() }
        let client = try TestHTTPClient(port: server.port)
        for index in 0..<3 {
            let answer = try client.send("POST", "/later", body: Data("echo \(index)".utf8))
            XCTAssertEqual(answer.status, 202)
            XCTAssertEqual(String(decoding: answer.body, as: UTF8.self), "echo \(index)")
        }
    }

    func testStoppingWhileARouteHasNotAnsweredAnswers503AndCancelsIt() throws {
        let entered = DispatchSemaphore(value: 0)
        let cancelled = DispatchSemaphore(value: 0)
        let router = HTTPRouter<PlainContext>(routes: [
            HTTPRoute("GET", "/never") { _, _ in
                entered.signal()
                do {
                    try await Task.sleep(nanoseconds: 3_600_000_000_000)
                } catch {
                    cancelled.signal()
                    throw error
                }
                return .json(200, ["late": true])
            }
        ])
        let server = try HTTPServer(host: "127.0.0.1", port: 0, responder: router)
        let client = try TestHTTPClient(port: server.port)
        try client.write(Data("GET /never HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        XCTAssertEqual(entered.wait(timeout: .now() + 10), .success)
        server.stop()
        let answer = try client.readResponse()
        XCTAssertEqual(answer.status, 503)
        XCTAssertEqual(cancelled.wait(timeout: .now() + 10), .success, "the waiting handler's task is cancelled")
    }

    func testAnAddressInUseIsRefusedInWords() throws {
        let router = HTTPRouter<PlainContext>(routes: [])
        let server = try HTTPServer(host: "127.0.0.1", port: 0, responder: router)
        defer { server.stop() }
        XCTAssertThrowsError(try HTTPServer(host: "127.0.0.1", port: server.port, responder: router)) { error in
            XCTAssertTrue("\(error)".contains("cannot listen for HTTP on 127.0.0.1:\(server.port)"), "\(error)")
        }
    }

    func testABodyOverTheLimitGets413InTheErrorShape() throws {
        let router = HTTPRouter<PlainContext>(routes: [HTTPRoute("POST", "/in") { _, _ in .json(200, ["ok": true]) }])
        let server = try HTTPServer(host: "127.0.0.1", port: 0, responder: router, limits: HTTPServer.Limits(maxBodyBytes: 16))
        defer { server.stop() }
        let answer = try TestHTTPClient(port: server.port).send("POST", "/in", body: Data(repeating: 0x61, count: 17))
        XCTAssertEqual(answer.status, 413)
        XCTAssertEqual(String(decoding: answer.body, as: UTF8.self),
            #"{"error":{"code":"body_too_large","message":"the request body is larger than 16 bytes"}}"# + "\n")
    }

    func testTheForwardedClientIsBelievedOnlyFromATrustedProxy() {
        let trusted: HTTPServer.TrustedProxy = { $0 == "127.0.0.1" || $0 == "10.0.0.1" }
        XCTAssertEqual(HTTPServer.client(peer: "127.0.0.1", forwardedFor: "203.0.113.1, 198.51.100.1", trusted: trusted), "198.51.100.1")
        XCTAssertEqual(HTTPServer.client(peer: "127.0.0.1", forwardedFor: "198.51.100.1, 10.0.0.1", trusted: trusted), "198.51.100.1",
                       "a trusted hop is skipped")
        XCTAssertEqual(HTTPServer.client(peer: "192.0.2.9", forwardedFor: "198.51.100.1", trusted: trusted), "192.0.2.9")
        XCTAssertEqual(HTTPServer.client(peer: "127.0.0.1", forwardedFor: "not-an-address", trusted: trusted), "127.0.0.1")
        XCTAssertEqual(HTTPServer.client(peer: "127.0.0.1", forwardedFor: "198.51.100.1", trusted: nil), "127.0.0.1")
        XCTAssertEqual(HTTPServer.client(peer: "127.0.0.1", forwardedFor: "[2001:db8::1]", trusted: trusted), "[2001:db8::1]")
    }
}

/// The route table: patterns, specificity, 404 and 405, middleware order, the rate limiter.
final class HTTPRouterTests: XCTestCase {
    struct Tag: HTTPMiddleware {
        let name: String
        func handle(_ request: HTTPRequest, context: PlainContext, next: HTTPNext<PlainContext>) async throws -> HTTPResponse {
            var answer = try await next(request, context)
            answer.headers.append(("X-Through", name))
            return answer
        }
    }

    struct Refuse: HTTPMiddleware {
        func handle(_ request: HTTPRequest, context: PlainContext, next: HTTPNext<PlainContext>) async throws -> HTTPResponse {
            guard request.header("Authorization") == "yes" else { throw HTTPError(.error(401, code: "unauthorized", message: "no")) }
            return try await next(request, context)
        }
    }

    static func echo(_ request: HTTPRequest, _ context: PlainContext) async throws -> HTTPResponse {
        .json(200, context.parameters.merging(["route": request.method + " " + request.path]) { first, _ in first })
    }

    let router = HTTPRouter<PlainContext>(
        routes: [
            HTTPRoute("GET", "/calls/{call}", HTTPRouterTests.echo),
            HTTPRoute("POST", "/calls/{call}/decline", HTTPRouterTests.echo),
            HTTPRoute("GET", "/extensions", HTTPRouterTests.echo),
            HTTPRoute("POST", "/extensions", middleware: [Refuse()], HTTPRouterTests.echo),
            HTTPRoute("GET", "/extensions/{address}", HTTPRouterTests.echo),
            HTTPRoute("POST", "/extensions/{address}/devices/{id}/test", HTTPRouterTests.echo),
            HTTPRoute("GET", "/admin/", HTTPRouterTests.echo),
            HTTPRoute("GET", "/admin/{page}", middleware: [Tag(name: "outer"), Tag(name: "inner")], HTTPRouterTests.echo),
            HTTPRoute("GET", "/admin/push/new", HTTPRouterTests.echo),
        ], middleware: [Tag(name: "router")])

    func answer(_ method: String, _ path: String, headers: [String: String] = [:]) async -> (HTTPResponse, [String: Any]) {
        let response = await router.respond(to: HTTPRequest(method: method, path: path, headers: headers, body: Data(), remoteAddress: "127.0.0.1"))
        return (response, (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] ?? [:])
    }

    func testParametersTakeWholeSegmentsAndTheMostSpecificPatternWins() async {
        let (_, call) = await answer("GET", "/calls/a/b@host")
        XCTAssertEqual(call["call"] as? String, "a/b@host", "a Call-ID may hold a slash")
        let (_, decline) = await answer("POST", "/calls/a/b@host/decline")
        XCTAssertEqual(decline["call"] as? String, "a/b@host")
        let (_, device) = await answer("POST", "/extensions/1001@example.com/devices/abc/test")
        XCTAssertEqual(device["address"] as? String, "1001@example.com")
        XCTAssertEqual(device["id"] as? String, "abc")
        let (_, fixed) = await answer("GET", "/admin/push/new")
        XCTAssertEqual(fixed["route"] as? String, "GET /admin/push/new")
        XCTAssertNil(fixed["page"], "the fixed route wins over the parameter")
        let (_, page) = await answer("GET", "/admin/push/7")
        XCTAssertEqual(page["page"] as? String, "push/7")
        let (_, root) = await answer("GET", "/admin/")
        XCTAssertEqual(root["route"] as? String, "GET /admin/")
        XCTAssertEqual(router.routePattern(for: "/calls/x/decline"), "/calls/{call}/decline")
        XCTAssertEqual(router.routePattern(for: "/nowhere"), nil)
    }

    func testUnknownPathsAre404AndOtherMethods405WithAllow() async {
        let (missing, _) = await answer("GET", "/nowhere")
        XCTAssertEqual(missing.status, 404)
        XCTAssertEqual(String(decoding: missing.body, as: UTF8.self), #"{"error":{"code":"not_found","message":"no such path"}}"# + "\n")
        let (empty, _) = await answer("GET", "/calls/")
        XCTAssertEqual(empty.status, 404, "a parameter is never empty")
        let (wrong, body) = await answer("DELETE", "/extensions")
        XCTAssertEqual(wrong.status, 405)
        XCTAssertEqual(wrong.headers.first { $0.0 == "Allow" }?.1, "GET, POST")
        XCTAssertEqual((body["error"] as? [String: Any])?["code"] as? String, "method_not_allowed")
        XCTAssertEqual(wrong.headers.last?.1, "router", "the router's middleware runs around a 405 too")
    }

    func testMiddlewareRunsOutermostFirstAndMayRefuse() async {
        let (page, _) = await answer("GET", "/admin/x")
        XCTAssertEqual(page.headers.filter { $0.0 == "X-Through" }.map(\.1), ["inner", "outer", "router"])
        let (refused, _) = await answer("POST", "/extensions")
        XCTAssertEqual(refused.status, 401)
        let (allowed, _) = await answer("POST", "/extensions", headers: ["authorization": "yes"])
        XCTAssertEqual(allowed.status, 200)
    }

    func testTheRateLimiterRefusesPastTheBurstWithRetryAfter() async {
        let limited = HTTPRouter<PlainContext>(
            routes: [HTTPRoute("GET", "/x") { _, _ in .json(200, ["ok": true]) }],
            middleware: [HTTPRateLimitMiddleware(limiter: HTTPRateLimiter(rate: 1))])
        let request = HTTPRequest(method: "GET", path: "/x", headers: [:], body: Data(), remoteAddress: "192.0.2.1")
        var statuses: [Int] = []
        for _ in 0..<3 { statuses.append(await limited.respond(to: request).status) }
        XCTAssertEqual(statuses, [200, 200, 429])
        let refused = await limited.respond(to: request)
        XCTAssertEqual(refused.headers.first { $0.0 == "Retry-After" }?.1, "1")
        let other = HTTPRequest(method: "GET", path: "/nowhere", headers: [:], body: Data(), remoteAddress: "192.0.2.2")
        let otherStatus = await limited.respond(to: other).status
        XCTAssertEqual(otherStatus, 404, "another client is not limited")
    }
}
