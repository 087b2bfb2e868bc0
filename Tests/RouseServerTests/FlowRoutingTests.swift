import Crypto
import Foundation
import Registrar
import RouseLog
import RouseServer
import RouseTestSupport
import RouseVocabulary
import SIPMessage
import SIPService
import SIPTransaction
import SIPTransport
import XCTest

/// A phone behind NAT can only be reached over the flow its REGISTER came in on: requests to its
/// binding go out that way, and once the connection is gone the binding is unreachable.
final class FlowRoutingTests: XCTestCase {
    var service: SIPService!
    var registrar: Registrar!
    let aor = AddressOfRecord(number: "1001", domain: "example.com")

    override func setUpWithError() throws {
        let configuration = try ConfigurationLoader.load(
            flags: ["--sip-listen", "udp:127.0.0.1:0,tcp:127.0.0.1:0", "--log-level", "error"], environment: [:])
        let core = RegistrarCore(
            policy: RegistrationPolicy(),
            directory: DirectorySnapshot(domains: ["example.com"], extensions: [aor: ExtensionCredentials(aor: aor, password: "pw")]),
            supportedPushProviders: [], authenticator: DigestAuthenticator(secret: [1, 2, 3], nonceLifetime: 300), serverName: "Rouse/test")
        registrar = Registrar(core: core, store: InMemoryLocationStore())
        service = SIPService(configuration: configuration, logger: Logger(level: .error), registrar: registrar)
        try service.start()
    }

    override func tearDown() {
        service?.shutdown()
    }

    func register(_ client: TestSIPClient, transport: String) throws {
        func request(_ cseq: Int, _ authorization: String?) -> String {
            var text = "REGISTER sip:example.com SIP/2.0\r\nVia: SIP/2.0/\(transport) 10.0.0.9:5060;branch=z9hG4bK\(UUID().uuidString);rport\r\n"
            text += "Max-Forwards: 70\r\nFrom: <sip:1001@example.com>;tag=f\r\nTo: <sip:1001@example.com>\r\nCall-ID: flow-test\r\n"
            text += "CSeq: \(cseq) REGISTER\r\nContact: <sip:1001@10.0.0.9:5060;transport=\(transport.lowercased())>\r\nExpires: 600\r\n"
            if let authorization { text += "Authorization: \(authorization)\r\n" }
            return text + "Content-Length: 0\r\n\r\n"
        }
        try client.send(request(1, nil))
        let challenge = try XCTUnwrap(try receiveResponse(client))
        let offer = try XCTUnwrap(DigestCredentials(header: challenge.headers.lines(.wwwAuthenticate)[0]))
        let ha1 = Digest.hex(.md5, "1001:example.com:pw")
        let ha2 = Digest.hex(.md5, "REGISTER:sip:example.com")
        let digest = Digest.hex(.md5, "\(ha1):\(offer.nonce!):00000001:abc:auth:\(ha2)")
        try client.send(request(2, "Digest username=\"1001\", realm=\"example.com\", nonce=\"\(offer.nonce!)\", uri=\"sip:example.com\", response=\"\(digest)\", algorithm=MD5, cnonce=\"abc\", qop=auth, nc=00000001"))
        XCTAssertEqual(try receiveResponse(client)?.statusCode, 200)
    }

    func receiveResponse(_ client: TestSIPClient) throws -> SIPResponse? {
        guard let bytes = try client.receive(timeout: .seconds(10)), case .response(let response) = try SIPParser.parse(bytes) else { return nil }
        return response
    }

    func options(to binding: Binding) throws -> SIPRequest {
        SIPRequest(
            method: .options, uri: try SIPURI(parsing: binding.contact),
            headers: [("Max-Forwards", "70"), ("From", "<sip:rouse@example.com>;tag=r1"), ("To", "<\(binding.contact)>"),
                      ("Call-ID", UUID().uuidString), ("CSeq", "1 OPTIONS")])
    }

    func point(_ transport: SIPTransportKind) throws -> ListenPoint {
        try XCTUnwrap(service.listeningPoints.first { $0.transport == transport })
    }

    func testRequestToATCPBindingTravelsOverItsConnectionUntilItCloses() throws {
        let point = try point(.tcp)
        let phone = try TestSIPClient(transport: .tcp, host: point.host, port: point.port)
        try register(phone, transport: "TCP")
        let binding = try XCTUnwrap(registrar.bindings(for: aor).first)
        XCTAssertEqual(binding.flow.transport.rawValue, "tcp")
        XCTAssertTrue(service.isReachable(binding))

        // The Contact names 10.0.0.9, where nothing listens: the request must come down the connection.
        XCTAssertTrue(service.sendRequest(try options(to: binding), to: binding) { _ in })
        let bytes = try XCTUnwrap(try phone.receive(timeout: .seconds(10)), "the phone got the request over its connection")
        guard case .request(let request) = try SIPParser.parse(bytes) else { return XCTFail("not a request") }
        XCTAssertEqual(request.method, .options)
        XCTAssertEqual(request.topVia?.transport, "TCP")
        XCTAssertTrue(request.topVia?.hasRFC3261Branch ?? false)

        phone.close()
        let deadline = Date().addingTimeInterval(30)
        while service.isReachable(binding), Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        XCTAssertFalse(service.isReachable(binding), "a binding whose connection has gone is unreachable")
        XCTAssertFalse(service.sendRequest(try options(to: binding), to: binding) { _ in })
    }

    func testRequestToAUDPBindingGoesBackToTheAddressAndPortItCameFrom() throws {
        let point = try point(.udp)
        let phone = try TestSIPClient(transport: .udp, host: point.host, port: point.port)
        try register(phone, transport: "UDP")
        let binding = try XCTUnwrap(registrar.bindings(for: aor).first)
        XCTAssertEqual(binding.flow.sourceText, "127.0.0.1:\(phone.localPort)")
        XCTAssertTrue(service.sendRequest(try options(to: binding), to: binding) { _ in })
        let bytes = try XCTUnwrap(try phone.receive(timeout: .seconds(10)))
        guard case .request(let request) = try SIPParser.parse(bytes) else { return XCTFail("not a request") }
        XCTAssertEqual(request.method, .options)
    }
}
