import COpenSSL

/// Empties OpenSSL's (thread-local) error queue into one line; call right after the failing call.
func drainOpenSSLErrors(_ context: String) -> String {
    var reasons: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        var buffer = [UInt8](repeating: 0, count: 256)
        buffer.withUnsafeMutableBufferPointer { raw in
            raw.withMemoryRebound(to: CChar.self) { ERR_error_string_n(code, $0.baseAddress, $0.count - 1) }
        }
        reasons.append(String(decoding: buffer.prefix { $0 != 0 }, as: UTF8.self))
    }
    return reasons.isEmpty ? context : "\(context): \(reasons.joined(separator: "; "))"
}

/// Owns an `SSL_CTX` (server: certificate and key; client: verification settings) and frees it in
/// deinit. Immutable once made, so it may be shared between threads: OpenSSL allows `SSL_new` on one
/// context from several threads.
final class TLSContext: @unchecked Sendable {
    // @unchecked Sendable: the context is configured in the initializer only; afterwards OpenSSL
    // treats it as read-only and reference-counts it with atomics.
    let pointer: OpaquePointer
    /// Whether client connections verify the server certificate and its IP address.
    let verifiesPeer: Bool

    private init(method: OpaquePointer?, verifiesPeer: Bool) throws(SIPTransportError) {
        ERR_clear_error()
        guard let context = SSL_CTX_new(method) else { throw .tlsSetup(drainOpenSSLErrors("SSL_CTX_new")) }
        pointer = context
        self.verifiesPeer = verifiesPeer
        _ = rouse_SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION)
        _ = rouse_SSL_CTX_set_mode(context, Int(SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER))
    }

    deinit {
        SSL_CTX_free(pointer)
    }

    /// A server context presenting the certificate (chain) and key read from PEM files. With
    /// `clientCertificateAuthorityPath`, it asks each client for a certificate signed by one of
    /// that file's CAs and refuses one that does not verify; a client without a certificate is
    /// refused only when `requiresClientCertificate`.
    static func server(
        certificatePath: String, privateKeyPath: String, clientCertificateAuthorityPath: String? = nil,
        requiresClientCertificate: Bool = false
    ) throws(SIPTransportError) -> TLSContext {
        let context = try TLSContext(method: TLS_server_method(), verifiesPeer: false)
        // TLS 1.2 (1.3 keeps OpenSSL's own suites): forward secrecy and AEAD only, no CBC, SHA-1,
        // RSA key exchange or anonymous suites.
        guard SSL_CTX_set_cipher_list(context.pointer, TLSContext.serverCiphers) == 1 else {
            throw .tlsSetup(drainOpenSSLErrors("cannot set the cipher list"))
        }
        guard SSL_CTX_use_certificate_chain_file(context.pointer, certificatePath) == 1 else {
            throw .tlsSetup(drainOpenSSLErrors("cannot read certificate \(certificatePath)"))
        }
        guard SSL_CTX_use_PrivateKey_file(context.pointer, privateKeyPath, SSL_FILETYPE_PEM) == 1 else {
            throw .tlsSetup(drainOpenSSLErrors("cannot read private key \(privateKeyPath)"))
        }
        guard SSL_CTX_check_private_key(context.pointer) == 1 else {
            throw .tlsSetup(drainOpenSSLErrors("the private key does not match the certificate"))
        }
        if let authorities = clientCertificateAuthorityPath {
            try context.askForClientCertificates(authorities: authorities, required: requiresClientCertificate)
        }
        return context
    }

    /// Verifies client certificates against the CAs in `authorities` (and names them in the
    /// CertificateRequest, so a client knows which certificate to send).
    private func askForClientCertificates(authorities: String, required: Bool) throws(SIPTransportError) {
        guard SSL_CTX_load_verify_locations(pointer, authorities, nil) == 1 else {
            throw .tlsSetup(drainOpenSSLErrors("cannot read client CA file \(authorities)"))
        }
        guard let names = SSL_load_client_CA_file(authorities) else {
            throw .tlsSetup(drainOpenSSLErrors("no CA certificate in client CA file \(authorities)"))
        }
        SSL_CTX_set_client_CA_list(pointer, names)  // the context owns the list from here
        // A session resumed later must belong to this context (OpenSSL refuses resumption otherwise
        // once peers are verified).
        let sessionContext = Array("rouse-sip".utf8)
        _ = SSL_CTX_set_session_id_context(pointer, sessionContext, UInt32(sessionContext.count))
        let mode = SSL_VERIFY_PEER | (required ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0)
        SSL_CTX_set_verify(pointer, mode, nil)
    }

    /// The TLS 1.2 cipher suites a server offers (OpenSSL cipher-list syntax).
    static let serverCiphers = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!SHA1:!RC4:!3DES"

    /// A client context; without verification it accepts any server certificate.
    static func client(verifiesPeer: Bool, trustedCertificatesPath: String?) throws(SIPTransportError) -> TLSContext {
        let context = try TLSContext(method: TLS_client_method(), verifiesPeer: verifiesPeer)
        if verifiesPeer {
            SSL_CTX_set_verify(context.pointer, SSL_VERIFY_PEER, nil)
            let loaded: Int32
            if let path = trustedCertificatesPath {
                loaded = SSL_CTX_load_verify_locations(context.pointer, path, nil)
            } else {
                loaded = SSL_CTX_set_default_verify_paths(context.pointer)
            }
            guard loaded == 1 else {
                throw .tlsSetup(drainOpenSSLErrors("cannot load trusted certificates \(trustedCertificatesPath ?? "(default)")"))
            }
        } else {
            SSL_CTX_set_verify(context.pointer, SSL_VERIFY_NONE, nil)
        }
        return context
    }
}

/// One TLS connection driven through memory BIOs: ciphertext from the socket goes in with `feed`,
/// ciphertext for the socket comes out of `takeOutput`. Owns its `SSL` (and through it both BIOs)
/// and frees it in deinit. Not thread-safe: used by the event loop thread only.
final class TLSSession {
    enum Progress {
        case done
        case needMoreInput
        case failed(String)
    }

    enum ReadResult {
        case data([UInt8])
        case needMoreInput
        case closed
        case failed(String)
    }

    private let ssl: OpaquePointer
    private let input: OpaquePointer
    private let output: OpaquePointer

    /// A session for an accepted connection (server) or one Rouse opened (client, checking `peerIP`
    /// when the context verifies).
    init(context: TLSContext, isServer: Bool, peerIP: String?) throws(SIPTransportError) {
        ERR_clear_error()
        guard let ssl = SSL_new(context.pointer) else { throw .tlsSetup(drainOpenSSLErrors("SSL_new")) }
        guard let input = BIO_new(BIO_s_mem()), let output = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw .tlsSetup(drainOpenSSLErrors("BIO_new"))
        }
        // An empty input BIO means "retry later", not end of file.
        _ = rouse_BIO_set_mem_eof_return(input, -1)
        _ = rouse_BIO_set_mem_eof_return(output, -1)
        SSL_set_bio(ssl, input, output)  // the SSL owns both BIOs from here
        self.ssl = ssl
        self.input = input
        self.output = output
        if isServer {
            SSL_set_accept_state(ssl)
        } else {
            SSL_set_connect_state(ssl)
            if context.verifiesPeer, let peerIP {
                guard X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), peerIP) == 1 else {
                    throw .tlsSetup(drainOpenSSLErrors("cannot check certificate against \(peerIP)"))
                }
            }
        }
    }

    deinit {
        SSL_free(ssl)
    }

    /// Hands ciphertext received from the socket to OpenSSL.
    func feed(_ bytes: UnsafeRawBufferPointer) {
        var offset = 0
        while offset < bytes.count {
            let written = BIO_write(input, bytes.baseAddress! + offset, Int32(min(bytes.count - offset, Int(Int32.max))))
            if written <= 0 { break }
            offset += Int(written)
        }
    }

    var isHandshakeDone: Bool { SSL_is_init_finished(ssl) == 1 }

    /// Advances the handshake with the input fed so far.
    func handshake() -> Progress {
        ERR_clear_error()
        let result = SSL_do_handshake(ssl)
        if result == 1 { return .done }
        let error = SSL_get_error(ssl, result)
        switch error {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            return .needMoreInput
        default:
            return .failed(describe(error, "handshake"))
        }
    }

    /// The next plaintext decrypted from the input fed so far.
    func read(maxCount: Int = 16_384) -> ReadResult {
        ERR_clear_error()
        var buffer = [UInt8](repeating: 0, count: maxCount)
        let result = buffer.withUnsafeMutableBytes { SSL_read(ssl, $0.baseAddress, Int32($0.count)) }
        if result > 0 {
            buffer.removeSubrange(Int(result)...)
            return .data(buffer)
        }
        let error = SSL_get_error(ssl, result)
        switch error {
        case SSL_ERROR_WANT_READ, SSL_ERROR_WANT_WRITE:
            return .needMoreInput
        case SSL_ERROR_ZERO_RETURN:
            return .closed
        default:
            return .failed(describe(error, "read"))
        }
    }

    /// Encrypts `bytes`; the records come out of `takeOutput`. Only after the handshake.
    func write(_ bytes: [UInt8]) throws(SIPTransportError) {
        guard !bytes.isEmpty else { return }
        ERR_clear_error()
        let result = bytes.withUnsafeBytes { SSL_write(ssl, $0.baseAddress, Int32($0.count)) }
        if result <= 0 {
            throw .io(describe(SSL_get_error(ssl, result), "write"))
        }
    }

    /// Queues a close_notify alert (best effort).
    func close() {
        ERR_clear_error()
        _ = SSL_shutdown(ssl)
        ERR_clear_error()
    }

    /// Ciphertext OpenSSL produced for the socket.
    func takeOutput() -> [UInt8] {
        let pending = Int(BIO_ctrl_pending(output))
        guard pending > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: pending)
        let read = bytes.withUnsafeMutableBytes { BIO_read(output, $0.baseAddress, Int32($0.count)) }
        if read <= 0 { return [] }
        if Int(read) < pending { bytes.removeSubrange(Int(read)...) }
        return bytes
    }

    private func describe(_ error: Int32, _ operation: String) -> String {
        switch error {
        case SSL_ERROR_SYSCALL:
            return drainOpenSSLErrors("\(operation): unexpected end of stream")
        case SSL_ERROR_SSL:
            let verify = SSL_get_verify_result(ssl)
            if verify != X509_V_OK {
                return "\(operation): certificate verification failed: \(String(cString: X509_verify_cert_error_string(verify)))"
            }
            return drainOpenSSLErrors(operation)
        default:
            return drainOpenSSLErrors("\(operation): SSL error \(error)")
        }
    }
}
