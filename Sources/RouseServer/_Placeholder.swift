enum _PlaceholderRouseServer {}
