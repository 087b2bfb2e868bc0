enum _PlaceholderSIPTransaction {}
