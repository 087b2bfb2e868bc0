import CallRouting
import Foundation
import HTTPAPI
import HTTPServer
import Storage
import XCTest

/// The one route table against the one OpenAPI document: every documented route is in the
/// document with its method, and every path and method of the document is a route, so a route
/// added without documentation (or documentation of a route that is gone) fails here.
final class RouteTableTests: XCTestCase {
    /// Holds no call: the call routes exist, nothing is asked of them here.
    struct NoCalls: CallControl {
        func decline(_ claims: CallTokenClaims, reason: DeclineReason, completion: @escaping @Sendable (CallStatus?) -> Void) { completion(nil) }
        func status(_ claims: CallTokenClaims, completion: @escaping @Sendable (CallStatus?) -> Void) { completion(nil) }
    }

    func testTheDocumentNamesExactlyTheDocumentedRoutes() throws {
        // No job ever runs on this pool: nothing here reaches PostgreSQL.
        let pool = PostgresWorkerPool(settings: PostgresSettings(conninfo: "host=127.0.0.1 port=1 dbname=none", connectTimeout: 1), threads: 1)
        defer { pool.shutdown() }
        let service = try HTTPAPIService(
            listen: "127.0.0.1:0", pool: pool, directory: CredentialCache(),
            calls: CallAPIParts(signer: CallTokenSigner(secret: Array(repeating: 7, count: 32)), control: NoCalls(), instanceID: "test"))
        defer { service.stop() }

        let document = try XCTUnwrap(try JSONSerialization.jsonObject(with: OpenAPIDocument.data) as? [String: Any])
        let paths = try XCTUnwrap(document["paths"] as? [String: [String: Any]])
        let methods: Set<String> = ["get", "put", "post", "delete", "patch", "head", "options", "trace"]
        let documented = Set(paths.flatMap { path, item in item.keys.filter(methods.contains).map { "\($0.uppercased()) \(path)" } })
        let routed = Set(service.router.routes.filter(\.documented).map { "\($0.method) \($0.path)" })

        XCTAssertEqual(routed.subtracting(documented).sorted(), [], "routes the OpenAPI document does not describe")
        XCTAssertEqual(documented.subtracting(routed).sorted(), [], "operations of the OpenAPI document no route serves")
        XCTAssertEqual(routed.count, 32)
        XCTAssertTrue(service.router.routes.filter { !$0.documented }.allSatisfy { $0.path == "/" || $0.path.hasPrefix(AdminPages.base) },
                      "only the admin pages (HTML for browsers) are left out of the document")
    }
}
