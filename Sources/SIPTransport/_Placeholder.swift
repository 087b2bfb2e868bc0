enum _PlaceholderSIPTransport {}
