enum _PlaceholderRouseTestSupport {}
